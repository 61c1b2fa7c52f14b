import { createServer } from 'node:net';

export interface ListenPort {
  /** The variable that sets it (named in the message). */
  variable: string;
  port: number;
  host: string;
}

/**
 * Binds each port for a moment and lets go, before anything slow starts (the embedded
 * database, migrations): a port in use fails the start at once with one line naming the
 * variable, e.g. `MLLP_PORT=2575 is in use`. Port 0 (any free port) is not probed.
 */
export async function probeListenPorts(ports: readonly ListenPort[]): Promise<string[]> {
  const problems: string[] = [];
  for (const p of ports) {
    if (p.port === 0) continue;
    const problem = await probeOne(p);
    if (problem) problems.push(problem);
  }
  return problems;
}

function probeOne(p: ListenPort): Promise<string | undefined> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', (error: NodeJS.ErrnoException) => resolve(describeListenError(p, error)));
    server.listen({ port: p.port, host: p.host, exclusive: true }, () =>
      server.close(() => resolve(undefined)),
    );
  });
}

/** One line for a failed listen (also used when the real listen fails after the probe). */
export function describeListenError(p: ListenPort, error: NodeJS.ErrnoException): string {
  const where = `${p.variable}=${p.port}`;
  switch (error.code) {
    case 'EADDRINUSE':
      return `${where} is in use (another process listens on ${p.host}:${p.port}; stop it or set ${p.variable})`;
    case 'EACCES':
      return `${where} needs privileges this process does not have (choose a port above 1023)`;
    case 'EADDRNOTAVAIL':
    case 'ENOTFOUND':
      return `${where}: the host ${p.host} is not an address of this machine`;
    default:
      return `${where}: cannot listen on ${p.host}:${p.port}: ${error.code ?? error.message}`;
  }
}
