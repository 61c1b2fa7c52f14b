/** Injection tokens for what is built before Nest starts (config, logger, database). */
export const APP_CONFIG = Symbol('APP_CONFIG');
export const LOGGER = Symbol('LOGGER');
export const DATA_SOURCE = Symbol('DATA_SOURCE');
export const CLOCK = Symbol('CLOCK');
export const UPSTREAM_STATUS = Symbol('UPSTREAM_STATUS');
