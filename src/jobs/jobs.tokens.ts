export const JOB_QUEUE = Symbol('JOB_QUEUE');
