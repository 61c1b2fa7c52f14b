import { Global, Module } from '@nestjs/common';
import type { Logger } from 'pino';
import type { DataSource } from 'typeorm';
import { backgroundService } from '../common/background-service.provider';
import { APP_CONFIG, DATA_SOURCE, LOGGER } from '../common/tokens';
import type { AppConfig } from '../config/app-config';
import { cronJob } from '../jobs/cron-job.provider';
import type { JobQueue } from '../jobs/job-queue';
import { JOB_QUEUE } from '../jobs/jobs.tokens';
import { CStoreScpListener } from './cstore-scp.listener';
import { DicomWebClient } from './dicomweb.client';
import { DimseClient } from './dimse.client';
import { DimsePacs } from './dimse-pull';
import { StowController } from './stow.controller';
import { StowService } from './stow.service';
import { STOW_SERVICE, STUDY_PATHS } from './studies.tokens';
import { DefaultStudyAcquirer } from './study-acquirer.service';
import { StudyStoragePaths } from './study-storage.paths';
import { STUDY_ACQUIRER } from '../domain/study-acquirer.port';

export const EXPIRE_UNMATCHED_TASK = 'studies.expire-unmatched';

/** The DIMSE PACS of PACS_DIMSE_* (C-FIND, then C-MOVE to our SCP or C-GET). */
function dimsePacs(config: AppConfig, paths: StudyStoragePaths): DimsePacs {
  return new DimsePacs({
    client: new DimseClient({
      host: config.PACS_DIMSE_HOST!,
      port: config.PACS_DIMSE_PORT!,
      calledAeTitle: config.PACS_DIMSE_AE_TITLE!,
      callingAeTitle: config.DICOM_SCP_AE_TITLE,
      timeoutMs: config.PACS_DIMSE_TIMEOUT_SECONDS * 1000,
      retrieveTimeoutMs: config.PACS_DIMSE_RETRIEVE_TIMEOUT_SECONDS * 1000,
      maxInstances: config.PACS_DIMSE_MAX_INSTANCES,
      maxBytes: config.PACS_DIMSE_MAX_BYTES,
    }),
    retrieve: config.PACS_DIMSE_RETRIEVE,
    paths,
    maxInstances: config.PACS_DIMSE_MAX_INSTANCES,
    maxBytes: config.PACS_DIMSE_MAX_BYTES,
  });
}

/**
 * Study acquisition: the STOW-RS endpoint and the StudyAcquirer the order lifecycle injects
 * (STUDY_ACQUIRER, global so src/orders needs no import). Without DICOMWEB_URL or
 * PACS_DIMSE_HOST only pushed studies are used.
 */
@Global()
@Module({
  controllers: [StowController],
  providers: [
    {
      provide: STUDY_PATHS,
      inject: [APP_CONFIG],
      useFactory: (config: AppConfig) => new StudyStoragePaths(config.DATA_DIR),
    },
    {
      provide: STOW_SERVICE,
      inject: [DATA_SOURCE, STUDY_PATHS, LOGGER, APP_CONFIG, JOB_QUEUE],
      useFactory: (
        ds: DataSource,
        paths: StudyStoragePaths,
        logger: Logger,
        config: AppConfig,
        jobs: JobQueue,
      ) =>
        new StowService({
          dataSource: ds,
          paths,
          logger,
          jobs,
          maxRequestBytes: config.STOW_MAX_REQUEST_BYTES,
          maxInstances: config.STOW_MAX_INSTANCES,
          maxKeptRefused: config.STOW_MAX_KEPT_REFUSED,
          maxKeptRefusedTotal: config.STOW_MAX_KEPT_REFUSED_TOTAL,
          maxHeldUnmatchedPerSender: config.STUDY_MAX_HELD_UNMATCHED_PER_SENDER,
          maxHeldUnmatchedTotal: config.STUDY_MAX_HELD_UNMATCHED_TOTAL,
          unmatchedHoldMinutes: config.STUDY_UNMATCHED_HOLD_MINUTES,
        }),
    },
    {
      provide: STUDY_ACQUIRER,
      inject: [DATA_SOURCE, STUDY_PATHS, LOGGER, APP_CONFIG],
      useFactory: (ds: DataSource, paths: StudyStoragePaths, logger: Logger, config: AppConfig) =>
        new DefaultStudyAcquirer({
          dataSource: ds,
          paths,
          logger,
          quietPeriodSeconds: config.STUDY_QUIET_PERIOD_SECONDS,
          identityMatch: config.STUDY_IDENTITY_MATCH,
          dicomWeb: config.DICOMWEB_URL
            ? new DicomWebClient({
                baseUrl: config.DICOMWEB_URL,
                token: config.DICOMWEB_TOKEN,
                maxInstances: config.DICOMWEB_MAX_INSTANCES,
                maxBytes: config.DICOMWEB_MAX_BYTES,
              })
            : undefined,
          dimse: config.PACS_DIMSE_HOST ? dimsePacs(config, paths) : undefined,
        }),
    },
    // Deletes held, unmatched pushed instances and kept refused ones once their hold is over
    // (every minute).
    cronJob(
      EXPIRE_UNMATCHED_TASK,
      '* * * * *',
      [STUDY_ACQUIRER, STOW_SERVICE, LOGGER],
      async (acquirer: DefaultStudyAcquirer, stow: StowService, logger: Logger) => {
        const deleted = await acquirer.expireUnmatched();
        if (deleted > 0) logger.info({ deleted }, 'unmatched DICOM instances expired');
        const refused = await stow.expireRefused();
        if (refused > 0) logger.info({ refused }, 'kept refused DICOM instances expired');
      },
    ),
    // The C-STORE SCP, when DICOM_SCP_PORT is set (off by default).
    backgroundService(
      'C-STORE SCP',
      [APP_CONFIG, STOW_SERVICE, STUDY_PATHS, LOGGER],
      (config: AppConfig, stow: StowService, paths: StudyStoragePaths, logger: Logger) => {
        if (config.DICOM_SCP_PORT === undefined) return undefined;
        const listener = new CStoreScpListener({
          port: config.DICOM_SCP_PORT,
          host: config.DICOM_SCP_HOST ?? config.MLLP_HOST,
          aeTitle: config.DICOM_SCP_AE_TITLE,
          callingAeTitles: config.DICOM_SCP_CALLING_AE_TITLES,
          moveSourceAeTitle: config.PACS_DIMSE_AE_TITLE,
          maxAssociations: config.DICOM_SCP_MAX_ASSOCIATIONS,
          maxAssociationsPerClient: config.DICOM_SCP_MAX_ASSOCIATIONS_PER_CLIENT,
          timeoutMs: config.DICOM_SCP_TIMEOUT_SECONDS * 1000,
          maxInstanceBytes: config.STOW_MAX_REQUEST_BYTES,
          stow,
          paths,
          logger,
        });
        listener.start();
        return () => listener.stop();
      },
    ),
  ],
  exports: [STUDY_ACQUIRER, STOW_SERVICE, STUDY_PATHS],
})
export class StudiesModule {}
