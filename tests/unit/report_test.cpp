// What `explain` draws from (cli/memory_timeline.h) and the HTML page it writes
// (cli/report_html.h): the per-op layers add up to the plan's own figures, the tensors' lives
// add up to each op's allocated bytes, and the page is self-contained and cannot be broken
// out of by what the plan file holds.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>

#include "cli/report/memory_timeline.h"
#include "cli/report/report_data.h"
#include "cli/report/report_html.h"
#include "cli/report/timeline_svg.h"
#include "planner/core/units.h"
#include "planner/graph/allocator_model.h"
#include "test_plans.h"

namespace longctx::cli {
namespace {

// A CUDA plan whose loss runs in tiles (a large workspace at a few ops) and one on the CPU.
std::vector<Plan> plans() {
  Plan tiled = testing::gpu_plan("llama-3.2-1b", "h100-80gb", 2, 64 * 1024);
  tiled.parallel.ulysses = 2;
  tiled.parallel.checkpoint = CheckpointPolicy::full();
  tiled.parallel.loss_tiles = 4;
  Plan expandable = testing::gpu_plan("llama-3.2-1b", "h100-80gb", 1, 16 * 1024);
  expandable.cluster.expandable_segments = true;
  return {tiled, expandable, testing::cpu_plan("tiny-gqa", 1, 2048)};
}

TEST(MemoryTimeline, LayersAddUpToThePlansFigures) {
  for (const Plan& p : plans()) {
    const Evaluation e = evaluate(p);
    const MemoryTimeline t = memory_timeline(e);
    const Prediction& pr = e.plan.prediction;
    ASSERT_EQ(t.ops(), e.graph.ops().size());
    std::int64_t most_allocated = 0, most_reserved = 0;
    for (std::size_t i = 0; i < t.ops(); ++i) {
      EXPECT_EQ(t.allocated_total(i), e.sim.per_op[i].device_during) << i;
      EXPECT_GE(t.reserved[i], t.allocated_total(i)) << i;
      most_allocated = std::max(most_allocated, t.allocated_total(i));
      most_reserved = std::max(most_reserved, t.reserved[i]);
    }
    EXPECT_EQ(most_allocated, pr.peak_device_bytes);
    EXPECT_EQ(most_reserved, pr.peak_reserved_bytes);
    EXPECT_EQ(t.context, pr.peak_nvidia_smi_bytes - pr.peak_reserved_bytes);
    EXPECT_EQ(t.peak_bytes, pr.peak_nvidia_smi_bytes) << "the binding figure drawn is the plan's";
    EXPECT_EQ(t.binding(static_cast<std::size_t>(t.peak_op)), t.peak_bytes);
  }
}

TEST(MemoryTimeline, TheCachingAllocatorsReserveShows) {
  const Evaluation e = evaluate(plans()[0]);
  const MemoryTimeline t = memory_timeline(e);
  // The replay keeps segments a tile's workspace asked for: at some op reserved exceeds
  // allocated, and the reserve is drawn there.
  std::int64_t most_reserve = 0;
  for (std::size_t i = 0; i < t.ops(); ++i) most_reserve = std::max(most_reserve, t.reserved[i] - t.allocated_total(i));
  EXPECT_GT(most_reserve, 0);
  EXPECT_GT(t.context, 0);
}

TEST(MemoryTimeline, LiveTensorsAndWorkspaceAddUpToEachOpsAllocated) {
  for (const Plan& p : plans()) {
    const Evaluation e = evaluate(p);
    const MemoryTimeline t = memory_timeline(e);
    std::vector<std::int64_t> live(t.ops(), 0);
    for (const TensorLife& l : device_tensor_lives(e))
      for (int i = l.first; i <= l.last; ++i) live[static_cast<std::size_t>(i)] += l.bytes;
    for (std::size_t i = 0; i < t.ops(); ++i) {
      const OpSpec& op = e.graph.op(static_cast<int>(i));
      ASSERT_EQ(live[i] + allocated_bytes(p.cluster.hardware.backend, op.workspace_bytes), t.allocated_total(i)) << format(op.name);
    }
  }
}

TEST(TimelineSvg, TitleShowsTheBindingFigureAndEveryLayer) {
  const Evaluation e = evaluate(plans()[0]);
  const std::string svg = timeline_svg(e);
  EXPECT_NE(svg.find("nvidia-smi peak " + format_bytes(e.plan.prediction.peak_nvidia_smi_bytes)), std::string::npos);
  for (const char* layer : {"<title>allocator reserve</title>", "<title>context</title>", "<title>activations</title>"})
    EXPECT_NE(svg.find(layer), std::string::npos) << layer;
  // Every point of every area inside the picture.
  std::smatch size;
  ASSERT_TRUE(std::regex_search(svg, size, std::regex(R"re(width="([0-9.]+)" height="([0-9.]+)")re")));
  const double width = std::stod(size[1]), height = std::stod(size[2]);
  const std::regex point(R"re((-?[0-9.]+),(-?[0-9.]+))re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), point); it != std::sregex_iterator(); ++it) {
    const double x = std::stod((*it)[1]), y = std::stod((*it)[2]);
    ASSERT_TRUE(x >= 0 && x <= width && y >= 0 && y <= height) << it->str();
  }
  const Evaluation cpu = evaluate(plans()[2]);
  EXPECT_NE(timeline_svg(cpu).find("allocated peak " + format_bytes(cpu.plan.prediction.peak_nvidia_smi_bytes)), std::string::npos);
}

// A name from the plan file cannot leave the SVG malformed: XML 1.0 allows no control
// character but tab, newline and return (not even as a reference) and no byte outside UTF-8,
// so such bytes are drawn as the escapes a text answer shows.
TEST(TimelineSvg, ANameWithControlBytesLeavesTheSvgWellFormed) {
  Evaluation e = evaluate(plans()[2]);
  e.plan.model.name = "tiny\x1b[31mX\x01\xff<&>";
  e.plan.cluster.hardware.name = "cpu\nsecond line";
  const std::string svg = timeline_svg(e);
  for (const char c : svg) {
    const auto byte = static_cast<unsigned char>(c);
    EXPECT_TRUE(byte >= 0x20 || c == '\n' || c == '\t' || c == '\r') << "byte " << int(byte);
    EXPECT_NE(byte, 0xFF);
  }
  EXPECT_NE(svg.find("tiny\\x1B[31mX\\x01\\xFF&lt;&amp;&gt;"), std::string::npos);
  EXPECT_NE(svg.find("cpu\\x0Asecond line"), std::string::npos);
}

// The page's data, read back as the page's script reads it.
nlohmann::json embedded_data(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"report-data\">";
  const auto from = page.find(open) + open.size();
  return nlohmann::json::parse(page.substr(from, page.find("</script>", from) - from));
}

TEST(ReportHtml, SelfContainedAndNotBrokenOutOfByANameInThePlan) {
  Evaluation e = evaluate(plans()[2]);
  e.plan.model.name = "tiny</script><script>alert(1)</script>";
  const std::string page = report_html(e, nullptr);
  for (const char* url : {"http:", "https:", "//cdn", "src=", "@import"}) EXPECT_EQ(page.find(url), std::string::npos) << url;
  std::size_t scripts = 0;
  for (auto at = page.find("</script>"); at != std::string::npos; at = page.find("</script>", at + 1)) ++scripts;
  EXPECT_EQ(scripts, 2u) << "the data's script and the page's, no more";
  const nlohmann::json data = embedded_data(page);
  EXPECT_EQ(data["plan"]["model"]["name"], e.plan.model.name);
  EXPECT_EQ(data["peak_bytes"], e.plan.prediction.peak_nvidia_smi_bytes);
  EXPECT_EQ(data["ops"]["count"], e.graph.ops().size());
  EXPECT_FALSE(data.contains("ladder"));
}

TEST(ReportHtml, DeltaColumnsReadBackToTheTimeline) {
  const Evaluation e = evaluate(plans()[0]);
  const MemoryTimeline t = memory_timeline(e);
  const nlohmann::json data = report_data(e, t, nlohmann::json::array({{{"techniques", {"zero3"}}, {"max_tokens", 4096}, {"binding", "x"}}}));
  std::int64_t reserved = 0;
  for (std::size_t i = 0; i < t.ops(); ++i) {
    reserved += data["ops"]["reserved"][i].get<std::int64_t>();
    ASSERT_EQ(reserved, t.reserved[i]) << i;
  }
  EXPECT_EQ(data["ladder"][0]["max_tokens"], 4096);
  const std::string name = data["prefixes"][data["ops"]["prefix"][t.peak_op].get<int>()].get<std::string>() +
                           data["suffixes"][data["ops"]["suffix"][t.peak_op].get<int>()].get<std::string>();
  EXPECT_EQ(name, format(e.graph.op(t.peak_op).name));
}

class PlanFileLadder : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    const auto path = std::filesystem::temp_directory_path() / ("longctx-ladder-" + std::to_string(::getpid()) + ".json");
    std::ofstream(path) << text;
    paths_.push_back(path);
    return path.string();
  }
  void TearDown() override {
    for (const auto& p : paths_) std::filesystem::remove(p);
  }
  std::vector<std::filesystem::path> paths_;
};

TEST_F(PlanFileLadder, AbsentIsNullMalformedNamesTheField) {
  EXPECT_TRUE(plan_file_ladder(write(R"({"schema": "longctx.plan/1"})"))->is_null());
  const auto good = plan_file_ladder(write(R"({"ladder": [{"techniques": ["zero3", "ulysses"], "max_tokens": 8192, "binding": "device memory"}]})"));
  ASSERT_TRUE(good.ok());
  EXPECT_EQ((*good)[0]["techniques"][1], "ulysses");
  for (const auto& [text, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"ladder": {}})", "ladder"},
           {R"({"ladder": [{"techniques": [], "max_tokens": "many", "binding": ""}]})", "ladder[0].max_tokens"},
           {R"({"ladder": [{"techniques": [], "max_tokens": 1, "binding": ""}, {"techniques": [3], "max_tokens": 1, "binding": ""}]})",
            "ladder[1].techniques"},
           // A name no search runs would be drawn as a rung of it.
           {R"({"ladder": [{"techniques": ["zero9"], "max_tokens": 1, "binding": ""}]})", "ladder[0].techniques"}}) {
    const auto r = plan_file_ladder(write(text));
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().kind, ErrorKind::BadInput);
    EXPECT_EQ(r.error().field, field) << r.error().message;
  }
}

}  // namespace
}  // namespace longctx::cli
