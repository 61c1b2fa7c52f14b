import { existsSync } from 'node:fs';
import { extname, join } from 'node:path';
import { Worker } from 'node:worker_threads';
import type { Logger } from 'pino';
import type { PublicationInput } from '../mappings/publication.model';
import { buildMeasurementSr, type SourceStudy } from './dicom-result.builder';
import { dicomTagDump } from './dicom-tag-dump';
import type { SrBuildAnswer, SrBuildRequest } from './dicom-sr.worker';
import { OutboundError } from './outbound.error';

/** A built SR: its Part 10 bytes, the tag dump kept as what was sent, the values cut. */
export interface BuiltSr {
  part10: Buffer;
  sent: ReturnType<typeof dicomTagDump>;
  /** A line per value written shorter than it came (buildMeasurementSr). */
  cuts: string[];
}

/** An SR build the worker did not finish in time (the delivery is retried). */
export class SrBuildTimeoutError extends Error {
  constructor(ms: number) {
    super(`building the SR took longer than ${ms} ms; the worker was stopped`);
    this.name = 'SrBuildTimeoutError';
  }
}

/** A build asked for and not yet answered. */
interface Job {
  request: Omit<SrBuildRequest, 'id'>;
  resolve(built: BuiltSr): void;
  reject(error: Error): void;
}

/**
 * Builds measurement SRs on one worker thread, so that the event loop answering `/health`,
 * the MLLP intake and the other deliveries is never held by dcmjs (a 300-finding report:
 * about 1 s of CPU to write and dump). One build at a time, in order: the others wait here,
 * not in the worker, so a build's `timeoutMs` counts its own work only. A build over it
 * stops the worker; the builds waiting behind it go on in a new one. Where no worker can
 * start (a packaging without the worker file), the SR is built on the main thread, with one
 * warning.
 */
export class SrBuildOffload {
  private worker?: Worker;
  private nextId = 1;
  private readonly queue: Job[] = [];
  private current?: { id: number; job: Job; worker: Worker; timer: NodeJS.Timeout };
  private inline = false;

  constructor(private readonly options: { timeoutMs?: number; logger?: Logger } = {}) {}

  async build(input: PublicationInput, source: SourceStudy, now: Date): Promise<BuiltSr> {
    if (this.inline || !this.start()) return buildInline(input, source, now);
    // the PDF is not part of the SR: not copied to the worker
    const { pdf: _pdf, ...rest } = input;
    return new Promise<BuiltSr>((resolve, reject) => {
      this.queue.push({
        request: { input: rest as PublicationInput, source, now: now.toISOString() },
        resolve,
        reject,
      });
      this.next();
    });
  }

  /** Stops the worker (at shutdown); builds under way or waiting fail. */
  async close(): Promise<void> {
    const stopped = new Error('the SR worker was stopped');
    for (const job of this.queue.splice(0)) job.reject(stopped);
    await this.stopWorker();
  }

  /** Hands the next waiting build to the worker, when it has none. */
  private next(): void {
    if (this.current) return;
    const job = this.queue.shift();
    if (!job) {
      this.worker?.unref(); // an idle worker never keeps the process alive
      return;
    }
    const worker = this.start();
    if (!worker) {
      const { input, source, now } = job.request;
      job.resolve(buildInline(input, source, new Date(now)));
      this.next();
      return;
    }
    const id = this.nextId++;
    const timeoutMs = this.options.timeoutMs ?? 60_000;
    const timer = setTimeout(() => {
      if (this.current?.id !== id) return;
      this.current = undefined;
      job.reject(new SrBuildTimeoutError(timeoutMs));
      void this.stopWorker();
      this.next();
    }, timeoutMs);
    timer.unref();
    this.current = { id, job, worker, timer };
    worker.ref(); // a build under way keeps the process alive
    worker.postMessage({ id, ...job.request } satisfies SrBuildRequest);
  }

  private start(): Worker | undefined {
    if (this.worker) return this.worker;
    if (this.inline) return undefined;
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
      const current = this.current;
      // an answer of a stopped worker, or of a build already given up
      if (!current || current.worker !== worker || current.id !== answer.id) return;
      this.current = undefined;
      clearTimeout(current.timer);
      if ('error' in answer)
        current.job.reject(
          // a refusal of the builder (an invalid UID) stays one across the thread: dead, not retried
          answer.outbound
            ? new OutboundError(answer.outbound.code, answer.error, answer.outbound.detail)
            : new Error(answer.error),
        );
      else
        current.job.resolve({
          part10: Buffer.from(
            answer.part10.buffer,
            answer.part10.byteOffset,
            answer.part10.byteLength,
          ),
          sent: answer.sent,
          cuts: answer.cuts,
        });
      this.next();
    });
    // Only this worker's build fails with it: a worker stopped after a timeout goes away while
    // the next build already runs on its successor.
    const fail = (error: Error) => {
      if (this.worker === worker) this.worker = undefined;
      const current = this.current;
      if (!current || current.worker !== worker) return;
      this.current = undefined;
      clearTimeout(current.timer);
      current.job.reject(error);
      this.next();
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

function buildInline(input: PublicationInput, source: SourceStudy, now: Date): BuiltSr {
  const cuts: string[] = [];
  const part10 = buildMeasurementSr(input, source, now, cuts);
  return { part10, sent: dicomTagDump(part10), cuts };
}
