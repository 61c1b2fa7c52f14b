import { PeerBase } from '../common/peer-url';
import { ImagingClientError } from './imaging-client.error';
import { nextPageOf, type PageRequest } from './list-pages';

const base = new PeerBase('upstream', 'https://api.example.com/v1');
const current: PageRequest = { path: '/reports', query: { organizationId: 'org-1' } };
const next = (body: Record<string, unknown>) => nextPageOf(body, current, base, 'reports-poll');

describe('nextPageOf: liberal in the next-page markers it reads', () => {
  it('reads links (absolute, path, relative, ?query, HAL, links.next) within the base', () => {
    expect(next({ next: 'https://api.example.com/v1/reports?page=2' })).toEqual({
      path: '/reports',
      query: { page: '2' },
    });
    expect(next({ links: { next: '/v1/reports?after=x' } })).toEqual({
      path: '/reports',
      query: { after: 'x' },
    });
    expect(next({ _links: { next: { href: 'reports?after=y' } } })).toEqual({
      path: '/reports',
      query: { after: 'y' },
    });
    expect(next({ next_page: '?organizationId=org-1&p=3' })).toEqual({
      path: '/reports',
      query: { organizationId: 'org-1', p: '3' },
    });
  });

  it('reads tokens and page numbers, keeping the original query', () => {
    expect(next({ nextPageToken: 't1' })?.query).toEqual({
      organizationId: 'org-1',
      pageToken: 't1',
    });
    expect(next({ next_cursor: 'c1' })?.query).toEqual({ organizationId: 'org-1', cursor: 'c1' });
    expect(next({ pagination: { next_cursor: 'c2' } })?.query).toMatchObject({ cursor: 'c2' });
    expect(next({ next: 'opaque-token' })?.query).toMatchObject({ cursor: 'opaque-token' });
    expect(next({ next_page: 4 })?.query).toMatchObject({ page: '4' });
  });

  it('stops at no marker, an empty one, or has_more false', () => {
    expect(next({ reports: [] })).toBeNull();
    expect(next({ next: null, next_cursor: '' })).toBeNull();
    expect(next({ hasMore: false, next: '?p=2' })).toBeNull();
  });

  it('refuses a link to another host, scheme or path outside the base', () => {
    for (const link of [
      'https://evil.example/v1/reports?p=2',
      'http://api.example.com/v1/reports?p=2',
      'https://api.example.com/v2/reports',
      '//evil.example/v1/reports',
      '/v1/%2e%2e/admin',
    ]) {
      expect(() => next({ next: link })).toThrow(ImagingClientError);
    }
  });
});
