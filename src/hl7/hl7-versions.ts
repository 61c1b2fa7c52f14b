/** HL7 table 0104 (version ID, as of v2.9): the values MSH-12.1 may hold, oldest first. */
export const HL7_VERSION_IDS = [
  '2.0',
  '2.0D',
  '2.1',
  '2.2',
  '2.3',
  '2.3.1',
  '2.4',
  '2.5',
  '2.5.1',
  '2.6',
  '2.7',
  '2.7.1',
  '2.8',
  '2.8.1',
  '2.8.2',
  '2.9',
] as const;
