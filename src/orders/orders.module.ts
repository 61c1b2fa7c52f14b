import { Module } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { DATA_SOURCE } from '../common/tokens';
import type { JobQueue } from '../jobs/job-queue';
import { JOB_QUEUE } from '../jobs/jobs.tokens';
import { OrderIntakeService } from './order-intake.service';

@Module({
  providers: [
    {
      provide: OrderIntakeService,
      inject: [DATA_SOURCE, JOB_QUEUE],
      useFactory: (dataSource: DataSource, jobs: JobQueue) =>
        new OrderIntakeService(dataSource, jobs),
    },
  ],
  exports: [OrderIntakeService],
})
export class OrdersModule {}
