import {
  Inject,
  Injectable,
  Module,
  type OnModuleDestroy,
  type OnModuleInit,
} from '@nestjs/common';
import type { Logger } from 'pino';
import type { DataSource } from 'typeorm';
import { z } from 'zod';
import { APP_CONFIG, DATA_SOURCE, LOGGER } from '../common/tokens';
import type { AppConfig } from '../config/app-config';
import { isUpstreamStatus } from '../imaging-spec/imaging-spec';
import type { ProductionImagingClient } from '../imaging-client/imaging-client.factory';
import { IMAGING, ImagingClientModule } from '../imaging-client/imaging-client.module';
import type { JobQueue } from '../jobs/job-queue';
import { JOB_QUEUE } from '../jobs/jobs.tokens';
import type { StatusRowKey } from '../mappings/status-mapping.table';
import { STUDY_ACQUIRER, type StudyAcquirer } from '../domain/study-acquirer.port';
import { ORDER_JOBS, OrderIntakeService } from './order-intake.service';
import { ORDER_EVENTS, type OrderEvents } from './order-events';
import { OrderRepository } from '../persistence/order.repository';
import { LIFECYCLE_JOBS, OrderLifecycleService } from './order-lifecycle.service';
import { OrderPollerService } from './order-poller.service';
import { OrdersController } from './orders.controller';

const orderPayload = z.object({ orderId: z.string().uuid() });
const documentsPayload = orderPayload.extend({
  upstreamStatus: z.string(),
  rowKey: z.string(),
});
const batchPayload = z.object({ batchId: z.string().min(1) });

/** Registers the lifecycle's job handlers and the minute tick (once per cluster). */
@Injectable()
class OrderJobs implements OnModuleInit, OnModuleDestroy {
  constructor(
    @Inject(JOB_QUEUE) private readonly jobs: JobQueue,
    @Inject(OrderLifecycleService) private readonly lifecycle: OrderLifecycleService,
    @Inject(OrderPollerService) private readonly poller: OrderPollerService,
  ) {}

  onModuleInit(): void {
    const { jobs, lifecycle } = this;
    jobs.registerTask(ORDER_JOBS.place, (p) =>
      lifecycle.placeUpstream(orderPayload.parse(p).orderId),
    );
    jobs.registerTask(ORDER_JOBS.cancel, (p) =>
      lifecycle.cancelUpstream(orderPayload.parse(p).orderId),
    );
    jobs.registerTask(ORDER_JOBS.updateMetadata, (p) =>
      lifecycle.updateMetadata(orderPayload.parse(p).orderId),
    );
    jobs.registerTask(LIFECYCLE_JOBS.acquire, (p) =>
      lifecycle.acquireStudy(orderPayload.parse(p).orderId),
    );
    jobs.registerTask(LIFECYCLE_JOBS.upload, (p) =>
      lifecycle.uploadStudy(orderPayload.parse(p).orderId),
    );
    jobs.registerTask(LIFECYCLE_JOBS.fetchDocuments, (p) => {
      const { orderId, upstreamStatus, rowKey } = documentsPayload.parse(p);
      if (!isUpstreamStatus(upstreamStatus)) return Promise.resolve();
      return lifecycle.fetchDocuments(orderId, upstreamStatus, rowKey as StatusRowKey);
    });
    jobs.registerTask(LIFECYCLE_JOBS.fetchBatchReport, (p) =>
      lifecycle.fetchBatchReport(batchPayload.parse(p).batchId),
    );
    jobs.registerTask(LIFECYCLE_JOBS.tick, async () => {
      await this.poller.tick();
    });
    // Every minute; the poll cycle itself runs when due (POLL_INTERVAL_SECONDS with jitter).
    jobs.registerCron('* * * * *', LIFECYCLE_JOBS.tick);
  }

  onModuleDestroy(): void {
    this.poller.stop();
  }
}

@Module({
  imports: [ImagingClientModule],
  controllers: [OrdersController],
  providers: [
    {
      provide: OrderIntakeService,
      inject: [DATA_SOURCE, JOB_QUEUE, APP_CONFIG],
      useFactory: (dataSource: DataSource, jobs: JobQueue, config: AppConfig) =>
        new OrderIntakeService(dataSource, jobs, {
          maxInFlight: config.INTAKE_BATCHES_IN_FLIGHT,
          maxBatch: config.INTAKE_BATCH_MAX_MESSAGES,
        }),
    },
    {
      provide: OrderLifecycleService,
      inject: [DATA_SOURCE, JOB_QUEUE, IMAGING, STUDY_ACQUIRER, ORDER_EVENTS, LOGGER, APP_CONFIG],
      useFactory: (
        dataSource: DataSource,
        jobs: JobQueue,
        imaging: ProductionImagingClient,
        acquirer: StudyAcquirer,
        events: OrderEvents,
        logger: Logger,
        config: AppConfig,
      ) =>
        new OrderLifecycleService({
          dataSource,
          jobs,
          imaging,
          acquirer,
          events,
          logger: logger.child({ component: 'orders' }),
          settings: {
            studyDeadlineMs: config.STUDY_DEADLINE_MINUTES * 60_000,
            upstreamStuckMs: config.UPSTREAM_STUCK_HOURS * 3_600_000,
            leaseMs: config.ORDER_LEASE_SECONDS * 1000,
            sandboxOutcomeFromNotes:
              config.IMAGING_SANDBOX_OUTCOME_FROM_NOTES || config.useEmbeddedSandbox,
          },
        }),
    },
    {
      provide: OrderPollerService,
      inject: [DATA_SOURCE, IMAGING, OrderLifecycleService, LOGGER, APP_CONFIG],
      useFactory: (
        dataSource: DataSource,
        imaging: ProductionImagingClient,
        lifecycle: OrderLifecycleService,
        logger: Logger,
        config: AppConfig,
      ) =>
        new OrderPollerService({
          dataSource,
          client: imaging.client,
          lifecycle,
          logger: logger.child({ component: 'poller' }),
          intervalMs: config.POLL_INTERVAL_SECONDS * 1000,
        }),
    },
    {
      provide: OrderRepository,
      inject: [DATA_SOURCE],
      useFactory: (dataSource: DataSource) => new OrderRepository(dataSource),
    },
    OrderJobs,
  ],
  exports: [OrderIntakeService, OrderLifecycleService, OrderPollerService],
})
export class OrdersModule {}
