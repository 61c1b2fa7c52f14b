import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../../src/persistence/embedded-postgres';

/**
 * A real Orthanc PACS (Debian `orthanc` + `orthanc-dicomweb`) on free loopback ports, with
 * its own storage in a temp directory. DICOMweb at `${url}/dicom-web`, REST at `url`.
 */
export interface RunningOrthanc {
  url: string;
  dicomWebUrl: string;
  dicomPort: number;
  aet: string;
  stop(): Promise<void>;
  /** SIGKILL, as a PACS that dies mid-transfer (the storage directory stays until stop()). */
  kill(): void;
  /** Uploads one DICOM Part 10 file through Orthanc's REST API. */
  store(part10: Buffer): Promise<{ ID: string; ParentStudy: string }>;
}

const PLUGIN_DIRS = ['/usr/share/orthanc/plugins', '/usr/lib/orthanc/plugins'];

export interface OrthancOptions {
  /**
   * DIMSE peers Orthanc knows (DicomModalities): AE title → host and port. A C-MOVE to an AE
   * not listed here is answered 0xA801 (move destination unknown).
   */
  modalities?: Record<string, { host: string; port: number }>;
}

export async function startOrthanc(options: OrthancOptions = {}): Promise<RunningOrthanc> {
  const dir = mkdtempSync(join(tmpdir(), 'orthanc-'));
  const httpPort = await freePort();
  const dicomPort = await freePort();
  const aet = 'TESTPACS';
  const config = {
    Name: 'adapter-test-pacs',
    StorageDirectory: join(dir, 'storage'),
    IndexDirectory: join(dir, 'index'),
    HttpPort: httpPort,
    DicomPort: dicomPort,
    DicomAet: aet,
    RemoteAccessAllowed: false,
    AuthenticationEnabled: false,
    HttpServerEnabled: true,
    DicomServerEnabled: true,
    StableAge: 1,
    // Any calling AE may query and retrieve (C-FIND, C-GET, C-MOVE); a C-MOVE still needs its
    // destination in DicomModalities.
    DicomAlwaysAllowEcho: true,
    DicomAlwaysAllowFind: true,
    DicomAlwaysAllowGet: true,
    DicomAlwaysAllowMove: true,
    DicomModalities: Object.fromEntries(
      Object.entries(options.modalities ?? {}).map(([ae, peer]) => [
        ae.toLowerCase(),
        [ae, peer.host, peer.port],
      ]),
    ),
    Plugins: PLUGIN_DIRS,
    DicomWeb: {
      Enable: true,
      Root: '/dicom-web/',
      EnableWado: true,
      Ssl: false,
      StudiesMetadata: 'Full',
    },
  };
  const configFile = join(dir, 'orthanc.json');
  writeFileSync(configFile, JSON.stringify(config));
  const child: ChildProcess = spawn('Orthanc', [configFile], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  child.stderr?.on('data', (c: Buffer) => {
    log = (log + c.toString()).slice(-8000);
  });
  const url = `http://127.0.0.1:${httpPort}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`Orthanc exited (${child.exitCode}):\n${log}`);
    try {
      const res = await fetch(`${url}/system`);
      if (res.ok) break;
    } catch {
      // starting
    }
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`Orthanc did not start within 30 s:\n${log}`);
    }
    await sleep(100);
  }
  return {
    url,
    dicomWebUrl: `${url}/dicom-web`,
    dicomPort,
    aet,
    kill() {
      if (child.exitCode === null) child.kill('SIGKILL');
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        await new Promise((r) => child.once('exit', r));
      }
      rmSync(dir, { recursive: true, force: true });
    },
    async store(part10: Buffer) {
      const res = await fetch(`${url}/instances`, { method: 'POST', body: new Uint8Array(part10) });
      if (!res.ok)
        throw new Error(`Orthanc refused the instance: ${res.status} ${await res.text()}`);
      return (await res.json()) as { ID: string; ParentStudy: string };
    },
  };
}
