import {
  allOk,
  badRequest,
  convertToSearchableTokens,
  created,
  deepClone,
  evalFhirPathTyped,
  globalSchema,
  parseFhirPath,
  matchesSearchRequest,
  multipleMatches,
  Operator,
  OperationOutcomeError,
  splitSearchOnComma,
  toTypedValue,
  type FhirPathAtom,
  type Filter,
  type SearchRequest,
  type WithId,
} from '@medplum/core';
import { MemoryRepository, type CreateResourceOptions } from '@medplum/fhir-router';
import type { Bundle, BundleEntry, OperationOutcome, Resource } from '@medplum/fhirtypes';

/** What the identifier index did, for tests that assert on work rather than on time. */
export interface IdentifierIndexStats {
  /** Searches answered from the index. */
  indexedSearches: number;
  /** Resources the indexed searches examined (candidates the index gave them). */
  candidatesExamined: number;
  /** Searches handed to MemoryRepository's own search (a scan of every resource of the type). */
  scans: number;
}

type Store = Map<string, Map<string, Resource>>;

/**
 * Medplum's MemoryRepository with an index on the `identifier` search parameter, as a
 * production FHIR server has one. MemoryRepository answers every search, and the search inside
 * every conditional create/update/delete/patch, by testing each stored resource of the type;
 * with thousands of results in the test EHR that scan was most of the test process's CPU.
 *
 * The engine stays Medplum's: every write goes through MemoryRepository (which stores it and
 * keeps its history), and the conditional interactions keep Medplum's own logic (0/1/many
 * matches). Only the candidate set of a search changes: when a search has an `identifier`
 * filter (no modifier) whose values all carry a code, the candidates are the resources of the
 * type holding a token with that code (case-insensitive, as Medplum matches tokens), and each
 * candidate, read from MemoryRepository's own store, is then tested against the whole request
 * with Medplum's `matchesSearchRequest`, so the system part, the other filters and the case
 * are decided exactly as before. Paging (`_count`, `_offset`) and the searchset Bundle are
 * built as MemoryRepository builds them, in its order (first storage of the id). Searches the
 * index cannot narrow (no such filter, `system|` alone, chained parameters, `_sort`,
 * `_include`, several types) go to MemoryRepository unchanged.
 *
 * MemoryRepository has no hook for this: the index reads its map of current versions (a
 * private field, checked at construction) and is updated in the same synchronous step as
 * each write, so a search never sees a write the index has not.
 */
export class IndexedMemoryRepository extends MemoryRepository {
  readonly stats: IdentifierIndexStats = { indexedSearches: 0, candidatesExamined: 0, scans: 0 };
  /** resourceType → lower-cased token code → ids holding it (a superset: stale ids are harmless). */
  private readonly byValue = new Map<string, Map<string, Set<string>>>();
  /** resourceType → id → sequence of first storage (the iteration order of MemoryRepository's Map). */
  private readonly order = new Map<string, Map<string, number>>();
  /** Types written while the schema had no `identifier` parameter for them: never indexed. */
  private readonly unindexable = new Set<string>();
  private seq = 0;
  private lastGeneratedId?: string;

  constructor() {
    super();
    const store = (this as unknown as { resources?: unknown }).resources;
    if (!(store instanceof Map)) {
      throw new Error('MemoryRepository keeps its resources elsewhere now: update the index');
    }
  }

  /** MemoryRepository's current versions by type and id (read only here). */
  private get store(): Store {
    return (this as unknown as { resources: Store }).resources;
  }

  private stored(resourceType: string, id: string): Resource | undefined {
    return this.store.get(resourceType)?.get(id);
  }

  override generateId(): string {
    const id = super.generateId();
    this.lastGeneratedId = id;
    return id;
  }

  /**
   * Every create and update (MemoryRepository's update and patch store through here). Not
   * async: MemoryRepository stores inside the call, and the index follows at once.
   */
  override createResource<T extends Resource>(
    resource: T,
    options?: CreateResourceOptions,
    update = false,
  ): Promise<WithId<T>> {
    // The id MemoryRepository would generate, chosen here so the write can be found.
    const withId = { ...resource, id: resource.id ?? this.generateId() };
    const before = this.stored(resource.resourceType, withId.id);
    const saved = super.createResource(withId, options, update);
    this.reindex(resource.resourceType, withId.id, before);
    return saved;
  }

  override deleteResource(
    resourceType: string,
    id: string,
    options?: Parameters<MemoryRepository['deleteResource']>[2],
  ): Promise<void> {
    const before = this.stored(resourceType, id);
    const done = super.deleteResource(resourceType, id, options);
    this.reindex(resourceType, id, before);
    return done;
  }

  override expungeResources(resourceType: string, ids: string[]): Promise<void> {
    const before = ids.map((id) => this.stored(resourceType, id));
    const done = super.expungeResources(resourceType, ids);
    ids.forEach((id, i) => this.reindex(resourceType, id, before[i]));
    return done;
  }

  override clear(): void {
    super.clear();
    this.byValue.clear();
    this.order.clear();
  }

  override async search<T extends Resource>(
    searchRequest: SearchRequest<T>,
  ): Promise<Bundle<WithId<T>>> {
    const indexed = this.indexedSearch(searchRequest);
    if (indexed) return indexed;
    this.stats.scans++;
    return super.search(searchRequest);
  }

  /**
   * MemoryRepository's conditional create, with the lookup through the index when it can
   * narrow it. Synchronous from the lookup to the write, as MemoryRepository's is, so two
   * concurrent creates with the same criteria cannot both create.
   */
  override async conditionalCreate<T extends Resource>(
    resource: T,
    search: SearchRequest<T>,
    options?: CreateResourceOptions,
  ): Promise<{ resource: WithId<T>; outcome: OperationOutcome }> {
    if (search.resourceType !== resource.resourceType) {
      throw new OperationOutcomeError(
        badRequest('Search type must match resource type for conditional update'),
      );
    }
    search.count = 2;
    search.sortRules = undefined;
    const bundle = this.indexedSearch(search);
    if (!bundle) {
      // Criteria the index cannot narrow: MemoryRepository's own, which stores without
      // passing through createResource; the index follows in the same synchronous step.
      this.stats.scans++;
      const given = resource.id;
      const before = given === undefined ? undefined : this.stored(resource.resourceType, given);
      this.lastGeneratedId = undefined;
      const result = super.conditionalCreate(resource, search, options);
      const id = given ?? this.lastGeneratedId;
      if (id !== undefined) this.reindex(resource.resourceType, id, before);
      return result;
    }
    const matches = (bundle.entry ?? []).map((e) => e.resource as WithId<T>);
    if (matches.length === 1) {
      const existing = matches[0]!;
      if (!options?.assignedId && resource.id && resource.id !== existing.id) {
        throw new OperationOutcomeError(
          badRequest('Resource ID did not match resolved ID', resource.resourceType + '.id'),
        );
      }
      return { resource: existing, outcome: allOk };
    }
    if (matches.length > 1) throw new OperationOutcomeError(multipleMatches);
    return { resource: await this.createResource(resource, options), outcome: created };
  }

  /** The searchset MemoryRepository would answer, from the index; undefined when it cannot. */
  private indexedSearch<T extends Resource>(
    request: SearchRequest<T>,
  ): Bundle<WithId<T>> | undefined {
    const { resourceType } = request;
    if (
      request.types?.length ||
      request.sortRules?.length ||
      request.include?.length ||
      request.revInclude?.length ||
      !identifierExpression(resourceType) ||
      this.unindexable.has(resourceType)
    ) {
      return undefined;
    }
    const filters = request.filters ?? [];
    // Chained parameters are resolved by MemoryRepository's own search only.
    if (filters.some((f) => f.code.includes('.') || f.code.startsWith('_has:'))) return undefined;
    let candidates: Set<string> | undefined;
    for (const filter of filters) {
      candidates = this.candidatesFor(resourceType, filter);
      if (candidates) break;
    }
    if (!candidates) return undefined;

    const order = this.order.get(resourceType);
    const found: Array<{ resource: Resource; seq: number }> = [];
    for (const id of candidates) {
      const resource = this.stored(resourceType, id);
      if (resource) found.push({ resource, seq: order?.get(id) ?? 0 });
    }
    this.stats.indexedSearches++;
    this.stats.candidatesExamined += found.length;
    // MemoryRepository iterates its Map: the order in which each id was first stored.
    found.sort((a, b) => a.seq - b.seq);
    const result = found
      .map((f) => f.resource as WithId<T>)
      .filter((r) => matchesSearchRequest(r, request));
    let entry = result.map((resource): BundleEntry<WithId<T>> => ({
      search: { mode: 'match' },
      resource: deepClone(resource),
    }));
    if (request.offset !== undefined) entry = entry.slice(request.offset);
    if (request.count !== undefined) entry = entry.slice(0, request.count);
    return {
      resourceType: 'Bundle',
      type: 'searchset',
      entry: entry.length ? entry : undefined,
      total: result.length,
    };
  }

  /**
   * Ids that may match an `identifier` filter (a superset of the matches), or undefined when
   * the filter is not one the index can narrow. Value parsing follows Medplum's token match:
   * comma-separated alternatives, `system|code`, `|code`, `code`, compared without case.
   */
  private candidatesFor(resourceType: string, filter: Filter): Set<string> | undefined {
    if (filter.code !== 'identifier' || filter.operator !== Operator.EQUALS) return undefined;
    const index = this.byValue.get(resourceType);
    const ids = new Set<string>();
    for (const alternative of splitSearchOnComma(filter.value)) {
      let code = alternative;
      if (alternative.includes('|')) {
        const [system, value] = alternative.split('|');
        // `system|` matches any code of the system: not narrowed by a value index.
        if (system && !value) return undefined;
        // `|` alone matches nothing; `|code` and `system|code` need the code.
        code = value ?? '';
        if (!code) continue;
      }
      for (const id of index?.get(code.toLowerCase()) ?? []) ids.add(id);
    }
    return ids;
  }

  /** Brings the index in line with what MemoryRepository now stores under (type, id). */
  private reindex(resourceType: string, id: string, before: Resource | undefined): void {
    const after = this.stored(resourceType, id);
    if (after === before) return;
    if (after && !identifierExpression(resourceType)) this.unindexable.add(resourceType);
    let order = this.order.get(resourceType);
    if (!order) {
      order = new Map();
      this.order.set(resourceType, order);
    }
    if (!after) order.delete(id);
    else if (!order.has(id)) order.set(id, ++this.seq);

    const old = before ? identifierValues(before) : [];
    const now = after ? identifierValues(after) : [];
    let index = this.byValue.get(resourceType);
    if (!index) {
      index = new Map();
      this.byValue.set(resourceType, index);
    }
    for (const value of old) {
      if (now.includes(value)) continue;
      const ids = index.get(value);
      ids?.delete(id);
      if (ids?.size === 0) index.delete(value);
    }
    for (const value of now) {
      let ids = index.get(value);
      if (!ids) {
        ids = new Set();
        index.set(value, ids);
      }
      ids.add(id);
    }
  }
}

/** The FHIRPath of the type's `identifier` search parameter, when it is a token parameter. */
function identifierExpression(resourceType: string): string | undefined {
  const param = globalSchema.types[resourceType]?.searchParams?.identifier;
  return param?.type === 'token' ? param.expression : undefined;
}

/** Parsed `identifier` expression per resource type and parameter expression. */
const parsed = new Map<string, FhirPathAtom>();

/**
 * The part of the parameter's expression that can yield anything for this type. R4's shared
 * `identifier` parameter is a union of 30 paths (`AllergyIntolerance.identifier | … |
 * Task.identifier`); the paths of other types are empty for this resource, and evaluating
 * them all costs most of a write. Anything but a union of plain paths is kept whole.
 */
function expressionFor(resourceType: string, expression: string): string {
  const terms = expression.split('|').map((t) => t.trim());
  if (!terms.every((t) => /^[A-Za-z]+(\.[A-Za-z]+)+$/.test(t))) return expression;
  const own = terms.filter((t) => t.startsWith(`${resourceType}.`));
  return own.length > 0 ? own.join(' | ') : expression;
}

/**
 * Lower-cased codes of the tokens Medplum's matcher derives for the `identifier` parameter
 * (Identifier.value, and Identifier.type.text), with Medplum's own FHIRPath and token functions.
 */
function identifierValues(resource: Resource): string[] {
  const expression = identifierExpression(resource.resourceType);
  if (!expression) return [];
  const key = `${resource.resourceType} ${expression}`;
  let atom = parsed.get(key);
  if (!atom) {
    atom = parseFhirPath(expressionFor(resource.resourceType, expression));
    parsed.set(key, atom);
  }
  const typed = evalFhirPathTyped(atom, [toTypedValue(resource)]);
  const values = new Set<string>();
  for (const token of convertToSearchableTokens(typed)) {
    if (token.value) values.add(token.value.toLowerCase());
  }
  return [...values];
}
