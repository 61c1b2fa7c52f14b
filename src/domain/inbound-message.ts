/** How an inbound message reached us (inbound_messages.transport). */
export type InboundTransport = 'mllp' | 'fhir-rest' | 'fhir-subscription' | 'dicomweb' | 'api';

/** What became of an inbound message (inbound_messages.outcome). */
export type InboundOutcome = 'accepted' | 'rejected' | 'error' | 'duplicate';
