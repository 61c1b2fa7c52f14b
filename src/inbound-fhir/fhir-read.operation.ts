import type { ServiceRequest, Task } from '@medplum/fhirtypes';
import type { FhirResourceRepository, OrderForTask } from '../persistence/fhir-resource.repository';
import { mayRead, type SenderRestriction } from './fhir-request.context';
import { buildTask, withReferencesOnSource } from './fhir-served.resources';
import { FhirError } from './fhir.error';

const ORDER_ID = /^[0-9a-f-]{36}$/i;

/**
 * Reads: GET ServiceRequest/{id}, GET Task/{id} and the Task search. A sender token reads
 * only what it submitted; anything else is answered as unknown (404).
 */
export class FhirReadOperation {
  constructor(private readonly resources: FhirResourceRepository) {}

  async readServiceRequest(id: string, restriction?: SenderRestriction): Promise<ServiceRequest> {
    const stored = await this.resources.findServiceRequest(id);
    if (!stored || !mayRead(restriction, stored.sender))
      throw new FhirError('not-found', `ServiceRequest/${id} is not known here`);
    return withReferencesOnSource(stored.resource, stored.sourceUrl);
  }

  async readTask(id: string, restriction?: SenderRestriction): Promise<Task> {
    const order = ORDER_ID.test(id) ? await this.resources.orderForTask(id) : undefined;
    if (!order || !mayRead(restriction, order.sender))
      throw new FhirError('not-found', `Task/${id} is not known here`);
    return buildTask(order);
  }

  /**
   * Task search: `based-on=ServiceRequest/{id}` (or an absolute URL to it on `base`, this
   * server's FHIR base, `fhirBaseOf`) and `_id` (R4 task.html#search). An absolute URL
   * elsewhere names another server's request: it was matched by its id alone, and a
   * reference to another server's ServiceRequest found our Task.
   */
  async searchTasks(
    basedOn: string | undefined,
    id: string | undefined,
    restriction?: SenderRestriction,
    base?: string,
  ): Promise<Task[]> {
    if (!basedOn && !id) {
      throw new FhirError('bad-request', 'search Task by based-on=ServiceRequest/{id} or by _id', [
        {
          severity: 'error',
          code: 'not-supported',
          diagnostics: 'supported search parameters: based-on, _id',
          expression: ['based-on'],
        },
      ]);
    }
    let orders: OrderForTask[] = [];
    if (basedOn) {
      // the scheme aside: behind a TLS proxy the client writes https where we see http
      const on = base?.replace(/^https?:/i, '');
      const unschemed = basedOn.replace(/^https?:/i, '');
      const ours =
        on !== undefined && unschemed.startsWith(`${on}/`)
          ? unschemed.slice(`${on}/`.length)
          : basedOn;
      const m =
        /^ServiceRequest\/([A-Za-z0-9\-.]{1,64})$/.exec(ours) ??
        /^([A-Za-z0-9\-.]{1,64})$/.exec(ours);
      orders = m ? await this.resources.ordersForServiceRequest(m[1]!) : [];
    } else if (id && ORDER_ID.test(id)) {
      const one = await this.resources.orderForTask(id);
      orders = one ? [one] : [];
    }
    if (basedOn && id) orders = orders.filter((o) => o.orderId === id);
    // A sender token finds only the orders it submitted (other senders' patients stay unseen).
    return orders.filter((o) => mayRead(restriction, o.sender)).map(buildTask);
  }
}
