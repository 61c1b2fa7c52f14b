/**
 * The audit page's views, one file per page group (layout and shared pieces, dashboard,
 * orders, messages, tools); re-exported here for the controller.
 */
export type { PageContext } from './audit-page.layout';
export { h, signInPage, errorPage, rawBlock } from './audit-page.layout';
export type { DashboardUpstream } from './audit-dashboard.view';
export { dashboardPage } from './audit-dashboard.view';
export {
  orderListPage,
  orderPage,
  documentPage,
  orderOutboundPage,
  outboundDocumentPage,
} from './audit-orders.view';
export {
  messagePage,
  messageListPage,
  bulkReplayPage,
  deadLettersPage,
  replayConfirmPage,
} from './audit-messages.view';
export { mappingsPage, dryRunPage } from './audit-tools.view';
