import type { QcRound, UpstreamStatus } from '../imaging-spec/imaging-spec';
import { mergeMetadata, type Metadata } from './metadata-rules';
import { SandboxError, notFound } from './sandbox.error';
import type { StudyIntake } from './study-intake';
import type { Principal } from './token-store';

export interface StatusChange {
  status: UpstreamStatus;
  at: number;
  /** Global sequence: orders changes that share a timestamp. */
  seq: number;
  failureReason: string | null;
}

export interface QcRoundRecord {
  round: Exclude<QcRound, 'latest'>;
  verdict: 'passed' | 'failed' | 'bypassed';
  createdAt: number;
  checks: { name: string; result: 'pass' | 'fail' | 'warn'; value: string }[];
  note: string | null;
  /** Set when an Agent replaced the content (POST /agent/reports). */
  agentContent: Record<string, unknown> | null;
}

export interface BypassRequest {
  state: 'pending' | 'withdrawn' | 'granted';
  reason: string | null;
  requestedAt: number;
  decideAt: number;
  clientId: string;
}

export interface PlannedStep {
  status: UpstreamStatus;
  /** Milliseconds after the previous step. */
  afterMs: number;
  failureReason?: string;
}

export interface CompletedUpload {
  orderId: string;
  organizationId: string;
  studyUid: string | null;
  completedAt: number;
  objectPaths: string[];
  intake: StudyIntake;
}

export interface SandboxOrder {
  orderId: string;
  organizationId: string;
  ownerClientId: string;
  createdAt: number;
  /** Insertion sequence: breaks createdAt ties for "most recent order wins". */
  seq: number;
  updatedAt: number;
  status: UpstreamStatus;
  apiMetadata: Metadata;
  studyMetadata: Metadata;
  batchId: string | null;
  upload: CompletedUpload | null;
  /** Legacy `GET /upload`: single instances waiting for the 1-minute join gap to pass. */
  instanceGroup: {
    studyUid: string;
    paths: string[];
    intakes: StudyIntake[];
    lastAt: number;
  } | null;
  plan: PlannedStep[];
  nextAt: number | null;
  qcRounds: QcRoundRecord[];
  qcFailedAt: number | null;
  bypass: BypassRequest | null;
  failure: { step: UpstreamStatus; reason: string } | null;
  /** Failure report content synchronized by an Agent (POST /agent/reports). */
  agentFailure: Record<string, unknown> | null;
  history: StatusChange[];
}

export interface SandboxBatch {
  batchId: string;
  organizationId: string;
  createdAt: number;
  products: string[];
  orderIds: string[];
}

export interface MultipartUpload {
  uploadId: string;
  orderId: string;
  organizationId: string;
  state: 'open' | 'completed' | 'aborted';
  createdAt: number;
  announcedBytes: number | null;
  parts: Map<number, { etag: string; size: number; path: string }>;
  inFlight: number;
}

export interface ReportRecord {
  reportId: string;
  orderId: string;
  organizationId: string;
  kind: 'results' | 'failure' | 'qc';
  createdAt: number;
  acknowledged: boolean;
}

export interface AgentRecord {
  agentId: string;
  organizationId: string;
  lastHeartbeatAt: number;
}

export function metadataOf(order: SandboxOrder): Metadata {
  return mergeMetadata(order.studyMetadata, order.apiMetadata);
}

/** The body of an order change's answer (cancel, upload complete): the order and its status. */
export function orderStatusOf(order: SandboxOrder): { order_id: string; status: string } {
  return { order_id: order.orderId, status: order.status };
}

export function studyUidOf(order: SandboxOrder): string | null {
  const v = metadataOf(order).study_uid;
  return typeof v === 'string' ? v : null;
}

/** In-memory state. Access rules (contract "Authentication" 6, "list-orders") live here. */
export class SandboxState {
  readonly orders = new Map<string, SandboxOrder>();
  readonly batches = new Map<string, SandboxBatch>();
  readonly uploads = new Map<string, MultipartUpload>();
  readonly reports = new Map<string, ReportRecord>();
  readonly agents = new Map<string, AgentRecord>();
  readonly completedUploads: CompletedUpload[] = [];
  /** Single and instance PUTs whose bodies are still streaming, per organization. */
  readonly inflightPuts = new Map<string, number>();
  private seq = 0;

  nextSeq(): number {
    return ++this.seq;
  }

  /**
   * Other organizations' orders do not exist for the caller (404). Inside the organization a
   * standard user may only address their own orders; a colleague's order is 403 (assumption).
   */
  private checkAccess(order: SandboxOrder, principal: Principal): void {
    if (principal.role === 'user' && order.ownerClientId !== principal.clientId) {
      throw new SandboxError(
        403,
        'forbidden',
        'this order belongs to another user of your organization; standard users may address only their own orders',
      );
    }
  }

  byOrderId(orderId: string, principal: Principal): SandboxOrder {
    const order = this.orders.get(orderId);
    if (!order || order.organizationId !== principal.organizationId)
      throw notFound('order_not_found', `no order ${orderId}`);
    this.checkAccess(order, principal);
    return order;
  }

  /** Contract: "If several orders share one study UID, only the most recent is addressed". */
  byStudyUid(studyUid: string, principal: Principal): SandboxOrder {
    let best: SandboxOrder | null = null;
    for (const o of this.orders.values()) {
      if (o.organizationId !== principal.organizationId || studyUidOf(o) !== studyUid) continue;
      if (
        !best ||
        o.createdAt > best.createdAt ||
        (o.createdAt === best.createdAt && o.seq > best.seq)
      )
        best = o;
    }
    if (!best) throw notFound('order_not_found', `no order for study UID ${studyUid}`);
    this.checkAccess(best, principal);
    return best;
  }

  visibleOrders(principal: Principal): SandboxOrder[] {
    return [...this.orders.values()].filter(
      (o) =>
        o.organizationId === principal.organizationId &&
        (principal.role === 'org_admin' || o.ownerClientId === principal.clientId),
    );
  }

  activeUploads(organizationId: string): number {
    let n = this.inflightPuts.get(organizationId) ?? 0;
    for (const u of this.uploads.values())
      if (u.organizationId === organizationId && u.state === 'open') n++;
    return n;
  }
}
