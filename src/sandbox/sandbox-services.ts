import { join } from 'node:path';
import type { OrderLifecycle } from './order-lifecycle';
import type { UrlSigner } from './presigned-url';
import type { SandboxClock } from './sandbox-clock';
import type { SandboxOptions } from './sandbox-options';
import type { SandboxState } from './sandbox-state';
import type { TokenStore } from './token-store';

/** Everything a handler needs; built once per running sandbox. */
export interface SandboxServices {
  options: SandboxOptions;
  clock: SandboxClock;
  state: SandboxState;
  tokens: TokenStore;
  signer: UrlSigner;
  lifecycle: OrderLifecycle;
  /** Scheme, host and port that presigned URLs point at. */
  origin: () => string;
  dirs: { objects: string; uploads: string; tmp: string };
}

export function dataDirs(dataDir: string): SandboxServices['dirs'] {
  return {
    objects: join(dataDir, 'objects'),
    uploads: join(dataDir, 'uploads'),
    tmp: join(dataDir, 'tmp'),
  };
}
