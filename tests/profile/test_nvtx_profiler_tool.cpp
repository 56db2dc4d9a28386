// NvtxProfiler under a fake NVTX tool, statically injected the way NVTX3
// documents (a strong InitializeInjectionNvtx2_fnptr): the tool records what
// the profiler emits, so the test checks domain, registered names, colours,
// push/pop balance per thread and add()'s mark payload — not just "it ran".
#include <cstdint>

// This TU provides the static-injection symbol (NVTX then omits its weak
// null default); NVTX's init code needs it declared before its headers.
#define NVTX_STATIC_INJECTION_IMPL
extern "C" {
extern int (*InitializeInjectionNvtx2_fnptr)(const void* (*)(std::uint32_t));
}

#include <catch2/catch.hpp>
#include <dflash/profile/nvtx_profiler.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace dflash::literals;
using namespace std::chrono_literals;

namespace fake {
std::mutex m;
std::map<std::uintptr_t, std::string> domains;  // handle → name
std::map<std::uintptr_t, std::string> strings;  // handle → text
std::map<std::string, int> registrations;       // text → times registered
std::atomic<std::uintptr_t> next_handle{1};
std::atomic<long> pushes{0}, pops{0}, bad_pops{0}, bad_pushes{0};
struct mark_record {
  std::string domain, name;
  std::int32_t payload_type;
  std::int64_t payload;
};
std::vector<mark_record> marks;
std::map<std::string, std::uint32_t> colours;  // range name → ARGB
thread_local std::vector<std::string> open;     // this thread's open ranges
thread_local long max_depth = 0;

std::uintptr_t id(const void* h) { return reinterpret_cast<std::uintptr_t>(h); }

nvtxDomainHandle_t NVTX_API domain_create(const char* name) {
  const std::lock_guard g(m);
  const auto h = next_handle++;
  domains[h] = name;
  return reinterpret_cast<nvtxDomainHandle_t>(h);
}
nvtxStringHandle_t NVTX_API register_string(nvtxDomainHandle_t, const char* s) {
  const std::lock_guard g(m);
  const auto h = next_handle++;
  strings[h] = s;
  ++registrations[s];
  return reinterpret_cast<nvtxStringHandle_t>(h);
}
std::string text(const nvtxEventAttributes_t* a) {
  if (a->messageType != NVTX_MESSAGE_TYPE_REGISTERED) return "<not registered>";
  const std::lock_guard g(m);
  return strings.at(id(a->message.registered));
}
int NVTX_API push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  std::string name = text(a);
  {
    const std::lock_guard g(m);
    if (domains.at(id(d)) != "dflash" || a->colorType != NVTX_COLOR_ARGB) ++bad_pushes;
    colours[name] = a->color;
  }
  open.push_back(std::move(name));
  max_depth = std::max<long>(max_depth, static_cast<long>(open.size()));
  ++pushes;
  return static_cast<int>(open.size()) - 1;
}
int NVTX_API pop(nvtxDomainHandle_t) {
  ++pops;
  if (open.empty()) {
    ++bad_pops;
    return -1;
  }
  open.pop_back();
  return static_cast<int>(open.size());
}
void NVTX_API mark(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  std::string name = text(a);
  const std::lock_guard g(m);
  marks.push_back({domains.at(id(d)), std::move(name), a->payloadType, a->payload.llValue});
}

int NVTX_API init(NvtxGetExportTableFunc_t get_table) {
  const auto* cb = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable t = nullptr;
  unsigned size = 0;
  if (cb == nullptr || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &size) ||
      size <= NVTX_CBID_CORE2_DomainCreateA)
    return 0;
  *t[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&domain_create);
  *t[NVTX_CBID_CORE2_DomainRegisterStringA] = reinterpret_cast<NvtxFunctionPointer>(&register_string);
  *t[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&push);
  *t[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&pop);
  *t[NVTX_CBID_CORE2_DomainMarkEx] = reinterpret_cast<NvtxFunctionPointer>(&mark);
  return 1;
}
}  // namespace fake

extern "C" {
NvtxInitializeInjectionNvtxFunc_t InitializeInjectionNvtx2_fnptr = &fake::init;
}

using keys = dflash::key_set<"forward", "pack">;
using nvtx_t = dflash::NvtxProfiler<keys>;

TEST_CASE("ranges are pushed in the dflash domain with registered names, balanced, nested", "[nvtx][tool]") {
  const nvtx_t p;
  const long before = fake::pushes;
  for (int i = 0; i < 100; ++i) {
    auto outer = p.scope("forward"_key);
    REQUIRE(fake::open.back() == "forward");
    auto tok = p.begin("pack"_key);
    REQUIRE(fake::open == std::vector<std::string>{"forward", "pack"});
    p.end("pack"_key, tok);
    REQUIRE(fake::open == std::vector<std::string>{"forward"});
  }
  CHECK(fake::open.empty());
  CHECK(fake::max_depth == 2);
  CHECK(fake::pushes - before == 200);
  CHECK(fake::bad_pops == 0);
  CHECK(fake::bad_pushes == 0);
  const std::lock_guard g(fake::m);
  // Registered once per key, however many ranges.
  CHECK(fake::registrations.at("forward") == 1);
  CHECK(fake::registrations.at("pack") == 1);
  // A stable, opaque colour per key.
  CHECK((fake::colours.at("forward") >> 24) == 0xFF);
  CHECK(fake::colours.at("forward") == dflash::detail::nvtx_colour("forward"));
  CHECK(fake::colours.at("forward") != fake::colours.at("pack"));
}

TEST_CASE("add() emits one mark named after the key with the duration in ns as payload", "[nvtx][tool]") {
  const nvtx_t p;
  p.add("pack"_key, 1500us);
  const std::lock_guard g(fake::m);
  REQUIRE(!fake::marks.empty());
  const auto& mk = fake::marks.back();
  CHECK(mk.domain == "dflash");
  CHECK(mk.name == "pack");
  CHECK(mk.payload_type == NVTX_PAYLOAD_TYPE_INT64);
  CHECK(mk.payload == 1'500'000);
}

TEST_CASE("every thread's ranges balance on that thread", "[nvtx][tool]") {
  const nvtx_t p;
  const long pushes0 = fake::pushes, pops0 = fake::pops;
  std::atomic<int> balanced{0};
  std::vector<std::thread> ths;
  for (int t = 0; t < 4; ++t)
    ths.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        auto a = p.scope("forward"_key);
        auto b = p.scope("pack"_key);
      }
      if (fake::open.empty() && fake::max_depth == 2) balanced.fetch_add(1);
    });
  for (auto& th : ths) th.join();
  CHECK(balanced == 4);
  CHECK(fake::pushes - pushes0 == 4 * 1000);
  CHECK(fake::pops - pops0 == 4 * 1000);
  CHECK(fake::bad_pops == 0);
  const std::lock_guard g(fake::m);
  CHECK(fake::registrations.at("forward") == 1);
}
