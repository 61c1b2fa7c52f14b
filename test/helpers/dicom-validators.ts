import { execFileSync } from 'node:child_process';

/**
 * The errors dciodvfy (dicom3tools) reports for a DICOM file: each on a line starting "Error".
 * It first prints the IOD it checked (e.g. `Comprehensive3DSR`); without that line it did not
 * check the file (not installed: `sh: dciodvfy: not found`), and this throws rather than
 * answer "no errors" — before, every check of the hostile suites passed on a machine without it.
 */
export function dciodvfyErrors(file: string): string[] {
  const out = execFileSync('sh', ['-c', 'dciodvfy "$1" 2>&1 || true', 'sh', file], {
    encoding: 'utf8',
  });
  if (!/^[A-Za-z0-9]+$/m.test(out)) {
    throw new Error(
      `dciodvfy did not check ${file} (is dicom3tools installed?): ${out.slice(0, 200)}`,
    );
  }
  return out.split('\n').filter((l) => /^Error/.test(l));
}
