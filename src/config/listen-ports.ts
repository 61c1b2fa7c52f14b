import type { ListenPort } from '../common/port-probe';
import type { AppConfig } from './app-config';

/** Every port this process listens on, with the variable that sets it. */
export function listenPorts(config: AppConfig): ListenPort[] {
  const ports: ListenPort[] = [
    { variable: 'HTTP_PORT', port: config.HTTP_PORT, host: config.HTTP_HOST },
    { variable: 'MLLP_PORT', port: config.MLLP_PORT, host: config.MLLP_HOST },
  ];
  if (config.DICOM_SCP_PORT !== undefined)
    ports.push({
      variable: 'DICOM_SCP_PORT',
      port: config.DICOM_SCP_PORT,
      host: config.DICOM_SCP_HOST ?? config.MLLP_HOST,
    });
  return ports;
}
