import { Module } from '@nestjs/common';
import { OrdersModule } from '../orders/orders.module';
import { MllpListenerService } from './mllp-listener.service';

@Module({
  imports: [OrdersModule],
  providers: [MllpListenerService],
  exports: [MllpListenerService],
})
export class InboundHl7Module {}
