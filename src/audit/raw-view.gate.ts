import { setImmediate as nextTurn } from 'node:timers/promises';
import { KeyedMutex } from '../common/keyed-mutex';

const gate = new KeyedMutex();

/**
 * Runs one stored message's raw view (its bytes read from PostgreSQL, decoded, parsed and
 * masked) at a time in this process, each in a turn of the event loop of its own. Such a view
 * of a 10 MB message (MLLP_MAX_MESSAGE_BYTES) is about 0.2 s of work that cannot be split;
 * views asked for at once ran back to back within one turn: 8 readers of one 9.5 MB message
 * held /health 0.9-1.3 s, 16 held it 2.3 s. In turn, /health is answered between two views.
 */
export function oneRawViewAtATime<T>(fn: () => Promise<T>): Promise<T> {
  return gate.run(['raw-view'], async () => {
    await nextTurn();
    return fn();
  });
}
