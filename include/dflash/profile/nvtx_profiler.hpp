#pragma once
// NvtxProfiler: every key is an NVTX3 push/pop range in the "dflash" domain,
// so stages show up as named, coloured ranges on the Nsight Systems timeline.
//
//   using prof_t = dflash::NvtxProfiler<dflash::key_set<"forward", "pack">>;
//   auto t = prof.scope("forward"_key);   // nvtxDomainRangePushEx ... Pop
//
// Cost: each key's message is registered once (a static per key and domain,
// registered_string_in<D>::get) and its event attributes are built once, so a
// range is one guarded static load plus one NVTX call per edge. NVTX3 is
// header-only and finds a tool with dlopen on first use: with no tool attached
// every call is a cheap no-op, and no CUDA runtime is needed at run time.
// Build needs the toolkit's include dir and ${CMAKE_DL_LIBS} (CMake:
// CUDA::nvtx3).
//
// Semantics fixed by NVTX push/pop:
//  * begin/end must nest LIFO on one thread (NVTX pops the innermost range of
//    the calling thread); scope() guarantees this — prefer it.
//  * add(k, d) has no NVTX duration counterpart: it emits an instant mark
//    named after the key whose int64 payload is d in nanoseconds (visible in
//    Nsight's mark tooltip), rather than silently dropping the value.
//
// The type is empty and stateless: stages hold it through profiler_ref at no
// size cost, and any number of NvtxProfiler objects share the same ranges.

#include <cstdint>
#include <stdexcept>
#include <string>

#if !__has_include(<nvtx3/nvtx3.hpp>)
#error "dflash/profile/nvtx_profiler.hpp needs NVTX3 headers: add the CUDA toolkit include dir (CMake: link CUDA::nvtx3)"
#endif
#include <nvtx3/nvtx3.hpp>

#include "dflash/detail/std_chrono.hpp"
#include "dflash/profile/key.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash {

/// The NVTX domain dflash ranges live in (filterable in Nsight Systems).
struct nvtx_domain {
  static constexpr char const* name{"dflash"};
};

namespace detail {
template <Key K>
struct nvtx_message {
  static constexpr char const* message{K::value.data};
};

/// A stable colour per key name (FNV-1a), bright enough to read labels on.
consteval std::uint32_t nvtx_colour(std::string_view s) noexcept {
  std::uint32_t h = 2166136261u;
  for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  return 0xFF000000u | ((h & 0x7F7F7Fu) + 0x404040u);  // each channel in [64, 191]
}

template <class Domain, Key K>
const nvtx3::event_attributes& nvtx_range_attributes() noexcept {
  static const nvtx3::event_attributes attr{
      nvtx3::registered_string_in<Domain>::template get<nvtx_message<K>>(),
      nvtx3::color{nvtx_colour(K::name())}};
  return attr;
}
}  // namespace detail

template <KeySet Keys = any_key, class Domain = nvtx_domain>
class NvtxProfiler {
 public:
  using keys = Keys;
  using domain = Domain;
  using duration = std::chrono::nanoseconds;
  static constexpr bool enabled = true;

  /// Push/pop ranges need no state between begin and end.
  struct token {};

  /// RAII range: pushes on construction, pops on destruction.
  class scope_type {
   public:
    scope_type(const scope_type&) = delete;
    scope_type& operator=(const scope_type&) = delete;
    ~scope_type() { nvtxDomainRangePop(nvtx3::domain::get<Domain>()); }

   private:
    friend NvtxProfiler;
    scope_type() noexcept = default;
  };

  template <Key K>
  token begin(K) const noexcept {
    push<K>();
    return {};
  }
  template <Key K>
  void end(K, token) const noexcept {
    check_key<K>();
    nvtxDomainRangePop(nvtx3::domain::get<Domain>());
  }
  template <Key K>
  [[nodiscard]] scope_type scope(K) const noexcept {
    push<K>();
    return scope_type{};
  }
  /// An instant mark named after the key, payload = d in ns. Negative → throws.
  template <Key K, class Rep, class Period>
  void add(K, std::chrono::duration<Rep, Period> d) const {
    check_key<K>();
    const auto ns = detail::checked_add_ns("dflash::NvtxProfiler", K::name(), d);
    const nvtx3::event_attributes mark{
        nvtx3::registered_string_in<Domain>::template get<detail::nvtx_message<K>>(),
        nvtx3::payload{static_cast<std::int64_t>(ns)}};
    nvtxDomainMarkEx(nvtx3::domain::get<Domain>(), mark.get());
  }
  constexpr void clear() const noexcept {}

 private:
  template <Key K>
  static constexpr void check_key() noexcept {
    require_key<Keys, K>();
  }
  template <Key K>
  static void push() noexcept {
    check_key<K>();
    nvtxDomainRangePushEx(nvtx3::domain::get<Domain>(), detail::nvtx_range_attributes<Domain, K>().get());
  }
};

static_assert(ProfilerPolicy<NvtxProfiler<>>);
static_assert(std::is_empty_v<NvtxProfiler<>>);

}  // namespace dflash
