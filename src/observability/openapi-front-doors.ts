/**
 * The FHIR and DICOMweb front doors in our OpenAPI document. Their controllers read raw bodies
 * (kept for the audit log) and answer FHIR / DICOM media types, so they carry no Swagger
 * decorators; they are described here, and test/foundation/openapi-docs.test.ts checks that
 * every /fhir and /dicomweb route the application serves is in the document.
 */
type Operation = Record<string, unknown>;

const fhirJson = { 'application/fhir+json': { schema: { type: 'object' } } };
const outcome = (description: string) => ({
  description,
  content: {
    'application/fhir+json': {
      schema: { type: 'object', description: 'an OperationOutcome naming the element' },
    },
  },
});
const sender = [{ bearer: [] }];
const idParam = {
  name: 'id',
  in: 'path',
  required: true,
  schema: { type: 'string', pattern: '^[A-Za-z0-9\\-.]{1,64}$' },
};

const fhirOp = (summary: string, extra: Operation = {}): Operation => ({
  tags: ['fhir'],
  summary,
  security: sender,
  responses: {
    '200': { description: 'the resource', content: fhirJson },
    '401': { description: 'no or unknown bearer credential' },
    '403': { description: 'not a sender (or admin) credential' },
  },
  ...extra,
});

export const FRONT_DOOR_PATHS: Record<string, Record<string, Operation>> = {
  '/fhir/metadata': {
    get: {
      tags: ['fhir'],
      summary: 'CapabilityStatement (public)',
      security: [],
      responses: { '200': { description: 'the CapabilityStatement', content: fhirJson } },
    },
  },
  '/fhir/ServiceRequest': {
    post: fhirOp('Create an order from a FHIR R4 ServiceRequest', {
      description:
        'Validated, mapped and stored in one transaction before 201. `If-None-Exist: identifier=system|value` makes it conditional (a resend gets the original answer). Unknown procedure codes follow FHIR_UNKNOWN_PROCEDURE.',
      parameters: [
        { name: 'If-None-Exist', in: 'header', required: false, schema: { type: 'string' } },
      ],
      requestBody: { required: true, content: fhirJson },
      responses: {
        '201': { description: 'created; Location names the ServiceRequest', content: fhirJson },
        '200': { description: 'If-None-Exist matched: the original', content: fhirJson },
        '400': outcome('not a ServiceRequest, or malformed'),
        '401': { description: 'no or unknown bearer credential' },
        '413': outcome(
          'larger than FHIR_MAX_BODY_BYTES, or too costly to read (more than FHIR_MAX_JSON_VALUES JSON values, or nested deeper than 100)',
        ),
        '422': outcome('not mappable (e.g. ServiceRequest.code not in the product table)'),
        '503': outcome('cannot be stored now (database unavailable); Retry-After'),
      },
    }),
  },
  '/fhir/ServiceRequest/{id}': {
    get: fhirOp('Read a ServiceRequest we accepted', { parameters: [idParam] }),
    put: fhirOp('Update (e.g. revoke = cancel) a ServiceRequest', {
      parameters: [
        idParam,
        { name: 'If-Match', in: 'header', required: false, schema: { type: 'string' } },
      ],
      requestBody: { required: true, content: fhirJson },
    }),
  },
  '/fhir': {
    post: fhirOp('Transaction or batch Bundle of ServiceRequests', {
      requestBody: { required: true, content: fhirJson },
      parameters: [{ name: 'Prefer', in: 'header', required: false, schema: { type: 'string' } }],
    }),
  },
  '/fhir/Task/{id}': { get: fhirOp("An order's Task (its status)", { parameters: [idParam] }) },
  '/fhir/Task': {
    get: fhirOp('Search Tasks by based-on=ServiceRequest/{id} or _id', {
      parameters: [
        { name: 'based-on', in: 'query', required: false, schema: { type: 'string' } },
        { name: '_id', in: 'query', required: false, schema: { type: 'string' } },
      ],
    }),
  },
  '/fhir/subscription-notifications': {
    post: fhirOp(
      'R4 Backport Subscription notification from the EHR (a history Bundle); with no body, a classic R4 rest-hook without payload (the EHR is searched)',
      { requestBody: { required: false, content: fhirJson } },
    ),
  },
  '/fhir/subscription-notifications/ServiceRequest/{id}': {
    put: fhirOp('Classic R4 rest-hook with payload: the EHR ServiceRequest created or updated', {
      parameters: [idParam],
      requestBody: { required: true, content: fhirJson },
    }),
    delete: fhirOp('Classic R4 rest-hook with payload: the EHR ServiceRequest was deleted', {
      parameters: [idParam],
    }),
  },
  '/dicomweb/studies': {
    post: {
      tags: ['dicomweb'],
      summary: 'STOW-RS: store DICOM instances (PS3.18 §10.5)',
      security: sender,
      requestBody: {
        required: true,
        content: {
          'multipart/related; type="application/dicom"': {
            schema: { type: 'string', format: 'binary' },
          },
        },
      },
      responses: {
        '200': { description: 'all stored (DICOM JSON response)' },
        '202': { description: 'some instances refused (FailedSOPSequence)' },
        '409': { description: 'none stored' },
        '413': { description: 'larger than STOW_MAX_REQUEST_BYTES' },
      },
    },
  },
  '/dicomweb/studies/{study}': {
    post: {
      tags: ['dicomweb'],
      summary: 'STOW-RS into one study (instances of other studies are refused)',
      security: sender,
      parameters: [{ name: 'study', in: 'path', required: true, schema: { type: 'string' } }],
      requestBody: {
        required: true,
        content: {
          'multipart/related; type="application/dicom"': {
            schema: { type: 'string', format: 'binary' },
          },
        },
      },
      responses: { '200': { description: 'stored' }, '400': { description: 'not a UID' } },
    },
  },
};

/** Adds the front doors to a generated document (their paths win over nothing: none exist). */
export function withFrontDoors<T extends { paths: Record<string, object> }>(document: T): T {
  for (const [path, ops] of Object.entries(FRONT_DOOR_PATHS))
    document.paths[path] = { ...(document.paths[path] ?? {}), ...ops };
  return document;
}
