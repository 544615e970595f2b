// GET /metrics: the daemon's status and its request metrics in the
// Prometheus text exposition format 0.0.4, for scraping by Prometheus or
// any agent that speaks it. Every family carries # HELP and # TYPE; names
// are moetier_..., in base units (_seconds, _bytes), counters end in _total.
#pragma once

#include <functional>
#include <string>

#include "moetier/v1/moetier.pb.h"
#include "stats/request_metrics.h"

namespace httplib {
class Server;
}

namespace moetier {

// `status_source` is called once per scrape, from the server's threads;
// `metrics` may be null (then the request families read zero) and must
// outlive the server.
void RegisterMetricsRoute(httplib::Server& server, std::function<v1::Status()> status_source,
                          const RequestMetrics* metrics);

std::string RenderPrometheusText(const v1::Status& status, const RequestMetricsSnapshot& m);

}  // namespace moetier
