/** Injection tokens of the studies module (STUDY_ACQUIRER is in domain/study-acquirer.port.ts). */
export const STOW_SERVICE = Symbol('STOW_SERVICE');
export const STUDY_PATHS = Symbol('STUDY_PATHS');
