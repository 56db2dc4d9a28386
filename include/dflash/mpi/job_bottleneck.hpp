#pragma once
// The bottleneck section of an MPI job's profile: each rank's pipeline judged
// from that rank's own snapshot (dflash/analysis/bottleneck.hpp), one block per
// rank, in the job table's order. Pure formatting, no MPI.
//
// The job sends snapshots, not pipeline layouts: where the job profile is read
// (rank 0), the program knows which pipeline each rank runs from its placement,
// so it names the layout per rank:
//
//   auto layout_of = [&](int r) { return r < targets ? target_layout : drafter_layout; };
//   std::fputs(dflash::mpi::format_job_bottlenecks(*res.profile, layout_of).c_str(), stdout);

#include <cstddef>
#include <functional>
#include <string>

#include "dflash/analysis/bottleneck.hpp"
#include "dflash/analysis/pipeline_layout.hpp"
#include "dflash/mpi/job_profile.hpp"
#include "dflash/profile/report.hpp"

namespace dflash::mpi {

/// One bottleneck block per rank (table), or {"ranks":[{"rank":r,"bottleneck":{...}}, ...]} (JSON).
/// A rank whose snapshot never arrived says so instead of being judged on nothing.
inline std::string format_job_bottlenecks(const job_profile& j,
                                          const std::function<analysis::pipeline_layout(int)>& layout_of,
                                          report_format f = report_format::table,
                                          const analysis::bottleneck_options& opt = {}) {
  std::string out = f == report_format::json ? "{\"ranks\":[" : "";
  for (std::size_t r = 0; r < j.ranks.size(); ++r) {
    const bool heard = r < j.heard.size() && j.heard[r];
    const int rank = static_cast<int>(r);
    if (f == report_format::json) {
      out += r ? ",{\"rank\":" : "{\"rank\":";
      out += std::to_string(r) + ",\"bottleneck\":";
      if (heard) {
        out += analysis::format_bottleneck(analysis::find_bottleneck(j.ranks[r], layout_of(rank), opt), f);
      } else {
        out += "{\"ok\":false,\"why_not\":\"no profile arrived from this rank\"}";
      }
      out += '}';
      continue;
    }
    out += detail::rank_label(rank) + ": ";
    out += heard ? analysis::format_bottleneck(analysis::find_bottleneck(j.ranks[r], layout_of(rank), opt), f)
                 : std::string("bottleneck: not enough data — no profile arrived from this rank\n");
  }
  if (f == report_format::json) out += "]}";
  return out;
}

}  // namespace dflash::mpi
