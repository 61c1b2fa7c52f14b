import { Readable } from 'node:stream';
import { BodyTooLargeError, readBodyText } from './bounded-body';

describe('readBodyText: a peer answer is read up to a bound', () => {
  it('reads an answer within the bound, in chunks', async () => {
    const body = Readable.from([Buffer.from('{"a":'), Buffer.from('"Grü'), Buffer.from('ße"}')]);
    expect(await readBodyText(body, 1024)).toBe('{"a":"Grüße"}');
  });

  it('stops an endless answer at the bound and destroys the stream', async () => {
    let produced = 0;
    const endless = new Readable({
      read() {
        produced += 64 * 1024;
        this.push(Buffer.alloc(64 * 1024, 0x20));
      },
    });
    await expect(readBodyText(endless, 1024 * 1024)).rejects.toBeInstanceOf(BodyTooLargeError);
    expect(endless.destroyed).toBe(true);
    expect(produced).toBeLessThan(4 * 1024 * 1024);
  });
});
