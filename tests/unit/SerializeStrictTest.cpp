// The IR JSON loader is strict: every edit of a saved example that breaks the
// schema is a UserError naming the JSON pointer of the problem.
#include "Examples.h"

#include "attn/Error.h"
#include "attn/Pipeline.h"
#include "attn/ir/Printer.h"
#include "attn/ir/Serialize.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <functional>

using namespace attn;
using Catch::Contains;
using Catch::Equals;
using Catch::EndsWith;
using Catch::StartsWith;
using nlohmann::json;

namespace {

/// mha's compiled graph as a JSON value, for editing.
json savedMha() {
  return json::parse(ir::saveJSON(*compile(examples::mha()).Graph));
}

/// Index of function \p Name in \p J's "functions".
size_t functionIndex(const json &J, const std::string &Name) {
  for (size_t I = 0; I < J["functions"].size(); ++I)
    if (J["functions"][I]["name"] == Name)
      return I;
  FAIL("no function " << Name);
  return 0;
}

void eraseFunction(json &J, const std::string &Name) {
  J["functions"].erase(functionIndex(J, Name));
}

/// The message loadJSON gives for \p J (which must be rejected).
std::string loadError(const json &J) {
  try {
    ir::loadJSON(J.dump());
  } catch (const UserError &E) {
    return E.what();
  }
  FAIL("the document was accepted");
  return "";
}

} // namespace

TEST_CASE("IR JSON: the unedited document loads and prints the same",
          "[serialize][strict]") {
  // The baseline the edits below start from.
  CompiledDefinition C = compile(examples::mha());
  CHECK(ir::toText(*ir::loadJSON(savedMha().dump())) == ir::toText(*C.Graph));
}

TEST_CASE("IR JSON: integers are not narrowed", "[serialize][strict]") {
  json J = savedMha();
  J["version"] = 4294967297ull; // 2^32 + 1: an int read would see 1
  CHECK_THAT(loadError(J),
             StartsWith("IR JSON: /version: unsupported version 4294967297"));
  J["version"] = 1.0;
  CHECK_THAT(loadError(J), StartsWith("IR JSON: /version: "));
  J = savedMha();
  // An operand index past 2^32 that names node 0 when cut to 32 bits.
  size_t Last = J["nodes"].size() - 1;
  REQUIRE(J["nodes"][Last].contains("args"));
  J["nodes"][Last]["args"][0] = 4294967296ull;
  CHECK_THAT(loadError(J),
             Equals("IR JSON: /nodes/" + std::to_string(Last) +
                    "/args/0: 4294967296 is not the index of an earlier "
                    "node"));
  J["nodes"][Last]["args"][0] = -1;
  CHECK_THAT(loadError(J), StartsWith("IR JSON: /nodes/" +
                                      std::to_string(Last) + "/args/0: "));
  J = savedMha();
  J["functions"][0]["results"][0]["node"] = 18446744073709551615ull;
  CHECK_THAT(loadError(J),
             StartsWith("IR JSON: /functions/0/results/0/node: "));
}

TEST_CASE("IR JSON: a function the definition kind needs is missing",
          "[serialize][strict]") {
  for (const char *Name :
       {"score_mod", "online_fwd", "online_fwd_epilogue", "forward"}) {
    INFO(Name);
    json J = savedMha();
    eraseFunction(J, Name);
    CHECK_THAT(loadError(J),
               Equals(std::string("IR JSON: /functions: missing function '") +
                      Name + "', which an attention definition needs"));
  }
  json J = savedMha();
  eraseFunction(J, "mask_mod");
  CHECK_THAT(loadError(J), Contains("missing function 'mask_mod', which "
                                    "has_mask needs"));
  J = savedMha();
  eraseFunction(J, "backward");
  CHECK_THAT(loadError(J), Contains("missing function 'backward', which "
                                    "has_backward needs"));
  // Linear attention needs its four mods.
  json L = json::parse(
      ir::saveJSON(*compile(examples::retentionLinear()).Graph));
  eraseFunction(L, "q_mod");
  CHECK_THAT(loadError(L), Equals("IR JSON: /functions: missing function "
                                  "'q_mod', which a linear definition "
                                  "needs"));
}

TEST_CASE("IR JSON: functions and results that do not belong",
          "[serialize][strict]") {
  json J = savedMha();
  J["has_mask"] = false;
  size_t M = functionIndex(J, "mask_mod");
  CHECK_THAT(loadError(J),
             Equals("IR JSON: /functions/" + std::to_string(M) +
                    "/name: 'mask_mod' is present but has_mask is false"));
  J = savedMha();
  J["functions"].push_back(J["functions"][0]);
  CHECK_THAT(loadError(J), EndsWith("function 'score_mod' appears twice"));
  J = savedMha();
  J["functions"][0]["name"] = "q_mod";
  CHECK_THAT(loadError(J), Equals("IR JSON: /functions/0/name: 'q_mod' is "
                                  "not a function of an attention "
                                  "definition"));
  J = savedMha();
  size_t F = functionIndex(J, "online_fwd");
  json &Rs = J["functions"][F]["results"];
  for (size_t I = 0; I < Rs.size(); ++I)
    if (Rs[I]["name"] == "o_scale") {
      Rs.erase(I);
      break;
    }
  CHECK_THAT(loadError(J), Equals("IR JSON: /functions/" + std::to_string(F) +
                                  "/results: missing result 'o_scale' of "
                                  "'online_fwd'"));
  J = savedMha();
  size_t Mask = functionIndex(J, "mask_mod");
  size_t Score = functionIndex(J, "score_mod");
  J["functions"][Mask]["results"][0]["node"] =
      J["functions"][Score]["results"][0]["node"];
  CHECK_THAT(loadError(J),
             Equals("IR JSON: /functions/" + std::to_string(Mask) +
                    "/results/0/node: must be a boolean"));
}

TEST_CASE("IR JSON: wrong types, unknown fields and bad declarations",
          "[serialize][strict]") {
  json J = savedMha();
  J["has_mask"] = "yes";
  CHECK_THAT(loadError(J), Equals("IR JSON: /has_mask: expected true or "
                                  "false"));
  J = savedMha();
  J["extra"] = 1;
  CHECK_THAT(loadError(J), Equals("IR JSON: /extra: unknown field"));
  J = savedMha();
  J["nodes"][0]["colour"] = "red";
  CHECK_THAT(loadError(J), Equals("IR JSON: /nodes/0/colour: unknown field"));
  J = savedMha();
  J.erase("kind");
  CHECK_THAT(loadError(J), Equals("IR JSON: /kind: missing"));
  J = savedMha();
  J["rowscales"].push_back(J["rowscales"][0]);
  CHECK_THAT(loadError(J), Equals("IR JSON: /rowscales/2/name: rowscale 'm' "
                                  "is declared twice"));
  J = savedMha();
  J["rowscales"][1]["init"] = "nan";
  CHECK_THAT(loadError(J), Equals("IR JSON: /rowscales/1/init: is NaN"));
  J = savedMha();
  J["inputs"] = json::array(
      {{{"name", "x"}, {"shape", "scalar"}, {"sample_lo", 1}, {"sample_hi", 0}}});
  CHECK_THAT(loadError(J), Equals("IR JSON: /inputs/0: sample range is empty "
                                  "(lo > hi)"));
  J["inputs"][0]["sample_hi"] = 2;
  J["inputs"].push_back(J["inputs"][0]);
  CHECK_THAT(loadError(J), Equals("IR JSON: /inputs/1/name: input 'x' is "
                                  "declared twice"));
}

// Found by the fuzzer (tests/fuzz/crashers/ir_json-internal-final-rowscale
// .json): a rowscale parameter named nowhere in the declarations loaded, and
// code generation stopped on an internal error.
TEST_CASE("IR JSON: rowscale parameters must name a declared rowscale",
          "[ir][json]") {
  for (const char *Kind : {"final", "rowscale"}) {
    INFO(Kind);
    json J = savedMha();
    bool Renamed = false;
    for (json &N : J["nodes"])
      if (!Renamed && N.value("op", "") == "param" &&
          N.value("param", "") == Kind) {
        N["name"] = "zzz";
        Renamed = true;
      }
    REQUIRE(Renamed);
    std::string M = loadError(J);
    CHECK(M.find("'zzz' is not declared in") != std::string::npos);
    CHECK(M.find("/nodes/") != std::string::npos);
  }
}
