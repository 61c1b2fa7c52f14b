import type { FaultConfig, FaultSpec } from './sandbox-options';
import { seededRandom } from '../common/seeded-random';

export type FaultDecision =
  | { kind: 'none'; delayMs: number; dropAfter: boolean }
  | { kind: 'drop'; delayMs: number }
  | { kind: 'error'; status: 500 | 503; delayMs: number }
  | { kind: 'rate'; delayMs: number };

/**
 * Decides per request whether to misbehave. Endpoint keys are tried most specific first:
 * "METHOD /path", "/path", then "*"; fields of the specific entry override those of "*".
 * The presigned storage PUTs use the key "storage".
 */
export class FaultInjector {
  private readonly random: () => number;

  constructor(private readonly config: FaultConfig | null) {
    this.random = config?.seed !== undefined ? seededRandom(config.seed) : Math.random;
  }

  decide(method: string, path: string): FaultDecision {
    if (!this.config) return { kind: 'none', delayMs: 0, dropAfter: false };
    const e = this.config.endpoints;
    const spec: FaultSpec = {
      ...(e['*'] ?? {}),
      ...(e[path] ?? {}),
      ...(e[`${method} ${path}`] ?? {}),
    };
    const roll = (share: number | undefined): boolean =>
      share !== undefined && share > 0 && this.random() < share;
    const delayMs = roll(spec.slowShare) ? (spec.slowMs ?? 0) : 0;
    if (roll(spec.drop)) return { kind: 'drop', delayMs };
    if (roll(spec.error5xx))
      return { kind: 'error', status: this.random() < 0.5 ? 500 : 503, delayMs };
    if (roll(spec.rate429)) return { kind: 'rate', delayMs };
    return { kind: 'none', delayMs, dropAfter: roll(spec.dropAfter) };
  }
}
