import { problemBody } from './problem-body';

describe('problemBody', () => {
  it('is RFC 9457 problem details: the path without its query, extras last', () => {
    expect(
      problemBody({ originalUrl: '/orders/1?x=1' }, 404, 'not_found', 'no such order', {
        orderId: '1',
      }),
    ).toEqual({
      type: 'about:blank',
      title: 'not_found',
      status: 404,
      detail: 'no such order',
      instance: '/orders/1',
      correlationId: undefined,
      orderId: '1',
    });
  });
});
