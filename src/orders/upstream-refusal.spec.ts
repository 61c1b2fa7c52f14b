import { ImagingClientError } from '../imaging-client/imaging-client.error';
import { maskFilePath, maskFreeText, upstreamRefusalView } from './upstream-refusal';

describe('upstream refusal view (what an analyst may see of an upstream answer)', () => {
  it('shows UID and numbered paths, and reduces any other segment to its first character', () => {
    expect(maskFilePath('DICOM/1.2.840.113619.2/1.2.840.113619.2.5.dcm')).toBe(
      'DICOM/1.2.840.113619.2/1.2.840.113619.2.5.dcm',
    );
    expect(maskFilePath('IM00012.dcm')).toBe('IM00012.dcm');
    expect(maskFilePath('metadata.json')).toBe('metadata.json');
    expect(maskFilePath('Mustermann_Erika/T1/brain.nii.gz')).toBe('M***/T1/b***.nii.gz');
    expect(maskFilePath('C:\\Users\\schmidt\\scan.dcm')).toBe('C***\\U***\\s***\\s***.dcm');
  });

  it('masks names, dates and long numbers in free text, but keeps UIDs, codes and URLs cut', () => {
    const text = maskFreeText(
      'patient MUSTERMANN^ERIKA born 19640812 (MRN 123456789) in 1.2.840.10008.5.1.4 at https://s3.example/b?X-Amz-Signature=abc',
    );
    expect(text).not.toMatch(/MUSTERMANN|ERIKA|0812|123456789|abc/);
    expect(text).toContain('M***^E***');
    expect(text).toContain('1964****');
    expect(text).toContain('1.2.840.10008.5.1.4');
    expect(text).toContain('https://s3.example/[redacted]');
    expect(maskFreeText('bad files: Mustermann/brain.dcm; Erika.dcm; DICOM/1.2.3/4.5.dcm')).toBe(
      'bad files: M***/b***.dcm; E***.dcm; DICOM/1.2.3/4.5.dcm',
    );
  });

  it('keeps every file of an invalid_study answer, masked', () => {
    const files = Array.from({ length: 300 }, (_, i) => ({
      file: `DICOM/1.2.3/1.2.3.${i}.dcm`,
      reason: `incomplete uncompressed pixel data (${i})`,
    }));
    const error = new ImagingClientError(
      'bad_request',
      'upload-single-put',
      'upstream answered 400',
      {
        status: 400,
        upstreamError: { error: 'invalid_study', message: 'study validation failed', files },
        fileProblems: [...files, { file: 'Doe^John.dcm', reason: 'not DICOM' }],
      },
    );
    const view = upstreamRefusalView(error)!;
    expect(view).toMatchObject({ status: 400, upstreamCode: 'invalid_study', filesTotal: 301 });
    expect(view.files).toHaveLength(301);
    expect(view.files![299]).toEqual(files[299]);
    expect(view.files![300]!.file).toBe('D***.dcm');
    expect(upstreamRefusalView(new Error('x'))).toBeUndefined();
  });
});
