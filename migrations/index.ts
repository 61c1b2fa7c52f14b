import { InitialSchema20261121090000 } from './20261121090000-initial-schema';
import { OrderIntake20261121093000 } from './20261121093000-order-intake';
import { JobOutbox20261121094000 } from './20261121094000-job-outbox';
import { ImagingClient20261121100000 } from './20261121100000-imaging-client';
import { FhirInbound20261121110000 } from './20261121110000-fhir-inbound';
import { AuditSearch20261121120000 } from './20261121120000-audit-search';
import { Studies20261121130000 } from './20261121130000-studies';
import { OrderLifecycle20261121140000 } from './20261121140000-order-lifecycle';
import { Outbound20261121150000 } from './20261121150000-outbound';
import { IngestFastPath20261121160000 } from './20261121160000-ingest-fast-path';
import { WorkerLiveness20261121170000 } from './20261121170000-worker-liveness';
import { OutboxClaimOwner20261121200000 } from './20261121200000-outbox-claim-owner';
import { AuditDashboard20261125030000 } from './20261125030000-audit-dashboard';
import { OutboxExchange20261125032000 } from './20261125032000-outbox-exchange';
import { IntakeNoJit20261125090000 } from './20261125090000-intake-no-jit';
import { IntakePlaceAttempted20261125160000 } from './20261125160000-intake-place-attempted';
import { IntakeGenericPlans20261127040000 } from './20261127040000-intake-generic-plans';
import { SubscriptionCatchUpFrom20261127043000 } from './20261127043000-subscription-catch-up-from';
import { OrdersPatientIdentifiers20261127220000 } from './20261127220000-orders-patient-identifiers';
import { LateCommitPaging20261128000000 } from './20261128000000-late-commit-paging';
import { InboundIfNoneExist20261128010000 } from './20261128010000-inbound-if-none-exist';
import { StudyInstancesBySeries20261128020000 } from './20261128020000-study-instances-by-series';
import { AuditcapLateCommitEventsDeadLetters20261128031000 } from './20261128031000-auditcap-late-commit-events-dead-letters';
import { HeldcapHeldUnmatchedBySender20261128032000 } from './20261128032000-heldcap-held-unmatched-by-sender';
import { Hl7echoSenderUniversalId20261128072000 } from './20261128072000-hl7echo-sender-universal-id';
import { FhirsrcOrdersReplacedBy20261128073000 } from './20261128073000-fhirsrc-orders-replaced-by';
import { AuditCursorKey20261128075000 } from './20261128075000-audit-cursor-key';
import { AuditRefusedMessages20261128075100 } from './20261128075100-audit-refused-messages';
import { EhreventsSubscriptionEventFocus20261128077000 } from './20261128077000-ehrevents-subscription-event-focus';
import { IdentityOrdersRetiredPatientIdentifiers20261128081000 } from './20261128081000-identity-orders-retired-patient-identifiers';
import { OutboxOrderPaging20261128101000 } from './20261128101000-outbox-order-paging';
import { PeersDestinationHealth20261128102000 } from './20261128102000-peers-destination-health';
import { PeersAlertCoalescing20261128102100 } from './20261128102100-peers-alert-coalescing';
import { Fhirrw2CreateResendByContent20261128112000 } from './20261128112000-fhirrw2-create-resend-by-content';
import { NfcOrderIdentifiers20261128132000 } from './20261128132000-nfc-order-identifiers';

/**
 * Every migration, oldest first. A migration is never edited after it lands: add a new
 * timestamped file and list it here.
 */
export const MIGRATIONS = [
  InitialSchema20261121090000,
  OrderIntake20261121093000,
  JobOutbox20261121094000,
  ImagingClient20261121100000,
  FhirInbound20261121110000,
  AuditSearch20261121120000,
  Studies20261121130000,
  OrderLifecycle20261121140000,
  Outbound20261121150000,
  IngestFastPath20261121160000,
  WorkerLiveness20261121170000,
  OutboxClaimOwner20261121200000,
  AuditDashboard20261125030000,
  OutboxExchange20261125032000,
  IntakeNoJit20261125090000,
  IntakePlaceAttempted20261125160000,
  IntakeGenericPlans20261127040000,
  SubscriptionCatchUpFrom20261127043000,
  OrdersPatientIdentifiers20261127220000,
  LateCommitPaging20261128000000,
  InboundIfNoneExist20261128010000,
  StudyInstancesBySeries20261128020000,
  AuditcapLateCommitEventsDeadLetters20261128031000,
  HeldcapHeldUnmatchedBySender20261128032000,
  Hl7echoSenderUniversalId20261128072000,
  FhirsrcOrdersReplacedBy20261128073000,
  AuditCursorKey20261128075000,
  AuditRefusedMessages20261128075100,
  EhreventsSubscriptionEventFocus20261128077000,
  IdentityOrdersRetiredPatientIdentifiers20261128081000,
  OutboxOrderPaging20261128101000,
  PeersDestinationHealth20261128102000,
  PeersAlertCoalescing20261128102100,
  Fhirrw2CreateResendByContent20261128112000,
  NfcOrderIdentifiers20261128132000,
];
