import { existsSync } from 'node:fs';
import { extname, join } from 'node:path';
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { PublicationInput } from '../mappings/publication.model';
import { buildMeasurementSr, type SourceStudy } from './dicom-result.builder';
import { dicomTagDump } from './dicom-tag-dump';
import type { SrBuildAnswer, SrBuildRequest } from './dicom-sr.worker';

/** A built SR: its Part 10 bytes and the tag dump kept as what was sent. */
export interface BuiltSr {
  part10: Buffer;
  sent: ReturnType<typeof dicomTagDump>;
}

/** An SR build the worker did not finish in time (the delivery is retried). */
export class SrBuildTimeoutError extends Error {
  constructor(ms: number) {
    super(`building the SR took longer than ${ms} ms; the worker was stopped`);
    this.name = 'SrBuildTimeoutError';
  }
}

/**
 * Builds measurement SRs on one worker thread, so that the event loop answering `/health`,
 * the MLLP intake and the other deliveries is never held by dcmjs (a 300-finding report:
 * about 1 s of CPU to write and dump). One build at a time, in order; a build over
 * `timeoutMs` stops the worker (a new one starts with the next build). Where no worker can
 * start (a packaging without the worker file), the SR is built on the main thread, with one
 * warning.
 */
export class SrBuildOffload {
  private worker?: Worker;
  private nextId = 1;
  private readonly pending = new Map<
    number,
    { resolve(built: BuiltSr): void; reject(error: Error): void; timer: NodeJS.Timeout }
  >();
  private inline = false;

  constructor(private readonly options: { timeoutMs?: number; logger?: Logger } = {}) {}

  async build(input: PublicationInput, source: SourceStudy, now: Date): Promise<BuiltSr> {
    // the PDF is not part of the SR: not copied to the worker
    const { pdf: _pdf, ...rest } = input;
    const worker = this.inline ? undefined : this.start();
    if (!worker) {
      const part10 = buildMeasurementSr(input, source, now);
      return { part10, sent: dicomTagDump(part10) };
    }
    const id = this.nextId++;
    const timeoutMs = this.options.timeoutMs ?? 60_000;
    return new Promise<BuiltSr>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new SrBuildTimeoutError(timeoutMs));
        void this.stopWorker();
      }, timeoutMs);
      timer.unref();
      this.pending.set(id, { resolve, reject, timer });
      worker.ref(); // a build under way keeps the process alive; an idle worker does not
      const request: SrBuildRequest = {
        id,
        input: rest as PublicationInput,
        source,
        now: now.toISOString(),
      };
      worker.postMessage(request);
    });
  }

  /** Stops the worker (at shutdown); builds under way fail. */
  async close(): Promise<void> {
    await this.stopWorker();
  }

  private start(): Worker | undefined {
    if (this.worker) return this.worker;
    const ext = extname(__filename);
    const file = join(__dirname, `dicom-sr.worker${ext}`);
    if (!existsSync(file)) {
      this.inline = true;
      this.options.logger?.warn(
        { file },
        'SR worker file missing: SRs are built on the main thread',
      );
      return undefined;
    }
    // From TypeScript sources (development, tests) the worker compiles as the process does.
    const execArgv = ext === '.ts' ? ['-r', require.resolve('@swc-node/register')] : [];
    const worker = new Worker(file, { execArgv });
    worker.on('message', (answer: SrBuildAnswer) => {
      const waiting = this.pending.get(answer.id);
      if (!waiting) return;
      this.pending.delete(answer.id);
      if (this.pending.size === 0) worker.unref();
      clearTimeout(waiting.timer);
      if ('error' in answer) waiting.reject(new Error(answer.error));
      else
        waiting.resolve({
          part10: Buffer.from(
            answer.part10.buffer,
            answer.part10.byteOffset,
            answer.part10.byteLength,
          ),
          sent: answer.sent,
        });
    });
    const fail = (error: Error) => {
      if (this.worker === worker) this.worker = undefined;
      for (const [id, waiting] of this.pending) {
        clearTimeout(waiting.timer);
        waiting.reject(error);
        this.pending.delete(id);
      }
    };
    worker.on('error', (error) => fail(error));
    worker.on('exit', (code) => fail(new Error(`the SR worker stopped (exit code ${code})`)));
    // after the listeners (adding a 'message' listener refs the worker again): an idle
    // worker never keeps the process alive
    worker.unref();
    this.worker = worker;
    return worker;
  }

  private async stopWorker(): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    if (worker) await worker.terminate();
  }
}
