import { mkdir, rm, writeFile } from 'node:fs/promises';
import { isAbsolute, join, resolve } from 'node:path';

/**
 * DATA_DIR must be a directory this process can write (study files, token hashes, the
 * sandbox's storage): created if missing, then a probe file written and removed. Checked at
 * boot, so a read-only volume or a wrong path fails the start with one line instead of a
 * healthy-looking adapter that answers every pushed study with a 500.
 */
export async function probeDataDir(
  dir: string,
  cwd = process.cwd(),
  timeoutMs = 5_000,
): Promise<string[]> {
  const where = isAbsolute(dir) ? dir : `${dir} (relative to ${cwd}: ${resolve(cwd, dir)})`;
  const probe = join(resolve(cwd, dir), `.write-probe-${process.pid}`);
  let timer: NodeJS.Timeout | undefined;
  try {
    // Bounded: a file system that does not answer (a stale network mount; Node's recursive
    // mkdir under /proc spins) fails the start instead of holding it.
    await Promise.race([
      (async () => {
        await mkdir(resolve(cwd, dir), { recursive: true, mode: 0o700 });
        await writeFile(probe, 'probe', { mode: 0o600 });
        await rm(probe, { force: true });
      })(),
      new Promise((_, reject) => {
        timer = setTimeout(
          () => reject(Object.assign(new Error('timed out'), { code: 'ETIMEDOUT' })),
          timeoutMs,
        );
        timer.unref();
      }),
    ]);
    return [];
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'error';
    return [`DATA_DIR: cannot write ${where}: ${code}${DESCRIPTIONS[code] ?? ''}`];
  } finally {
    clearTimeout(timer);
  }
}

const DESCRIPTIONS: Record<string, string> = {
  EROFS: ' (read-only file system)',
  EACCES: ' (permission denied)',
  ENOSPC: ' (no space left on the device)',
  ENOTDIR: ' (a part of the path is a file)',
  ENOENT: ' (the path cannot be created)',
  ETIMEDOUT: ' (the file system did not answer within 5 s)',
};
