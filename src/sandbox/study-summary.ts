import type { DicomInfo } from './dicom-header';
import type { Metadata } from './metadata-rules';
import type { FileProblem } from './sandbox.error';

// What an inspected upload amounts to (a StudyIntake), built from the DICOM headers read and
// any JSON sidecar; shared by the single-object and the archive inspection.

export interface StudyIntake {
  kind: 'dicom' | 'dicom-zip' | 'nifti-zip';
  studyUid: string | null;
  /** Metadata read from DICOM tags or a JSON sidecar (the API's values win later). */
  metadata: Metadata;
  instances: number;
  series: number;
  bytes: number;
  acquisition: {
    modality: string | null;
    studyDescription: string | null;
    seriesDescriptions: string[];
    rows: number | null;
    columns: number | null;
    sliceThicknessMm: number | null;
    fieldStrengthT: number | null;
    niftiFiles: string[];
    diffusionDirections: number | null;
  };
  /** SOP Instance UIDs, to merge single instances of one study (legacy /upload). */
  sopInstanceUids: string[];
  /** The DICOM files read (archive entry paths, or the object's label), as a refusal names them. */
  files: string[];
}

function metadataFromDicom(info: DicomInfo): Metadata {
  const m: Metadata = {};
  const set = (key: string, v: string | undefined): void => {
    if (v !== undefined) m[key] = v;
  };
  set('patient_id', info.patientId);
  set('patient_name', info.patientName);
  if (info.patientBirthDate && /^\d{8}$/.test(info.patientBirthDate))
    m.patient_birth_date = info.patientBirthDate;
  if (info.patientSex && ['M', 'F', 'O'].includes(info.patientSex)) m.patient_sex = info.patientSex;
  set('accession_number', info.accessionNumber);
  set('study_uid', info.studyUid);
  set('modality', info.modality);
  set('referring_physician', info.referringPhysician);
  set('procedure_code', info.procedureCode);
  set('institution_name', info.institutionName);
  return m;
}

export class DicomCollector {
  readonly infos: { file: string; info: DicomInfo }[] = [];

  add(file: string, info: DicomInfo): void {
    this.infos.push({ file, info });
  }

  problems(): FileProblem[] {
    const first = this.infos[0];
    if (!first) return [];
    return this.infos
      .filter((x) => x.info.studyUid !== first.info.studyUid)
      .map((x) => ({
        file: x.file,
        reason: `belongs to study ${x.info.studyUid}, but ${first.file} belongs to study ${first.info.studyUid}; one upload holds one study`,
      }));
  }
}

export function summarize(
  kind: StudyIntake['kind'],
  bytes: number,
  dicoms: DicomCollector,
  extra: Partial<StudyIntake['acquisition']>,
  sidecar: Metadata,
): StudyIntake {
  const first = dicoms.infos[0]?.info;
  const seriesDescriptions = [
    ...new Set(
      dicoms.infos.map((x) => x.info.seriesDescription).filter((d): d is string => d !== undefined),
    ),
  ];
  const fromDicom = first ? metadataFromDicom(first) : {};
  const metadata = { ...sidecar, ...fromDicom };
  return {
    kind,
    studyUid:
      first?.studyUid ?? (typeof metadata.study_uid === 'string' ? metadata.study_uid : null),
    metadata,
    instances: dicoms.infos.length,
    series: new Set(dicoms.infos.map((x) => x.info.seriesUid)).size,
    bytes,
    acquisition: {
      modality:
        first?.modality ?? (typeof metadata.modality === 'string' ? metadata.modality : null),
      studyDescription: first?.studyDescription ?? null,
      seriesDescriptions,
      rows: first?.rows ?? null,
      columns: first?.columns ?? null,
      sliceThicknessMm: first?.sliceThickness ?? null,
      fieldStrengthT: first?.magneticFieldStrength ?? null,
      niftiFiles: [],
      diffusionDirections: null,
      ...extra,
    },
    sopInstanceUids: dicoms.infos.map((x) => x.info.sopInstanceUid!).filter(Boolean),
    files: dicoms.infos.map((x) => x.file),
  };
}

/** Single instances of one study uploaded one by one (legacy /upload), taken as one upload. */
export function mergeInstanceIntakes(intakes: StudyIntake[]): StudyIntake {
  const first = intakes[0];
  const uids = new Set(intakes.flatMap((i) => i.sopInstanceUids));
  return {
    ...first,
    instances: uids.size,
    bytes: intakes.reduce((a, i) => a + i.bytes, 0),
    sopInstanceUids: [...uids],
    files: intakes.flatMap((i) => i.files),
    acquisition: {
      ...first.acquisition,
      seriesDescriptions: [...new Set(intakes.flatMap((i) => i.acquisition.seriesDescriptions))],
    },
  };
}
