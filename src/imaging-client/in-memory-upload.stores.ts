import type { MultipartProgress, UploadedPart, UploadProgressStore, UploadSlots } from './ports';

/** Progress kept in memory: for tests and single-process tools (a restart loses it). */
export class InMemoryUploadProgressStore implements UploadProgressStore {
  private readonly entries = new Map<string, MultipartProgress>();

  async load(orderId: string): Promise<MultipartProgress | null> {
    const entry = this.entries.get(orderId);
    return entry ? { ...entry, parts: entry.parts.map((p) => ({ ...p })) } : null;
  }

  async begin(progress: Omit<MultipartProgress, 'parts'>): Promise<void> {
    this.entries.set(progress.orderId, { ...progress, parts: [] });
  }

  async recordPart(orderId: string, uploadId: string, part: UploadedPart): Promise<void> {
    const entry = this.entries.get(orderId);
    if (!entry || entry.uploadId !== uploadId) return;
    entry.parts = [...entry.parts.filter((p) => p.partNumber !== part.partNumber), { ...part }];
  }

  async delete(orderId: string): Promise<void> {
    this.entries.delete(orderId);
  }

  async listUnfinished(): Promise<MultipartProgress[]> {
    return Promise.all(
      [...this.entries.keys()].map(async (id) => (await this.load(id)) as MultipartProgress),
    );
  }
}

/** Counting semaphore per organization, for one process. */
export class InMemoryUploadSlots implements UploadSlots {
  private readonly held = new Map<string, number>();
  private readonly waiting = new Map<string, Array<() => void>>();

  constructor(private readonly limit: number) {}

  async acquire(organizationId: string): Promise<() => Promise<void>> {
    if ((this.held.get(organizationId) ?? 0) >= this.limit) {
      await new Promise<void>((resolve) => {
        const queue = this.waiting.get(organizationId) ?? [];
        queue.push(resolve);
        this.waiting.set(organizationId, queue);
      });
    } else {
      this.held.set(organizationId, (this.held.get(organizationId) ?? 0) + 1);
    }
    let released = false;
    return async () => {
      if (released) return;
      released = true;
      const next = this.waiting.get(organizationId)?.shift();
      // The slot passes straight to the next waiter; otherwise it is given back.
      if (next) next();
      else this.held.set(organizationId, (this.held.get(organizationId) ?? 1) - 1);
    };
  }

  inUse(organizationId: string): number {
    return this.held.get(organizationId) ?? 0;
  }
}
