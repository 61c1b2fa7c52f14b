import { isImageSopClass } from './dicom-sop-classes.table';

describe('isImageSopClass (PS3.4 Table B.5-1)', () => {
  it.each([
    ['1.2.840.10008.5.1.4.1.1.4', true], // MR Image
    ['1.2.840.10008.5.1.4.1.1.4.1', true], // Enhanced MR Image
    ['1.2.840.10008.5.1.4.1.1.7', true], // Secondary Capture
    ['1.2.840.10008.5.1.4.1.1.481.1', true], // RT Image
    ['1.2.840.10008.5.1.4.1.1.481.2', false], // RT Dose
    ['1.2.840.10008.5.1.4.1.1.11.1', false], // Grayscale Softcopy Presentation State
    ['1.2.840.10008.5.1.4.1.1.88.59', false], // Key Object Selection
    ['1.2.840.10008.5.1.4.1.1.88.34', false], // Comprehensive 3D SR
    ['1.2.840.10008.5.1.4.1.1.104.1', false], // Encapsulated PDF
    ['1.2.840.10008.5.1.4.1.1.9.1.1', false], // 12-lead ECG
  ])('%s → %s', (uid, image) => {
    expect(isImageSopClass(uid)).toBe(image);
  });
});
