#pragma once
// A table of edits to a valid request, each of which the planner must refuse naming the
// option a user would change (the field of its exit-2 error).
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <utility>

#include "planner/search/request.h"

namespace longctx::testing {

using RequestEdit = void (*)(PlanRequest&);

// For each (option, edit): `valid()` edited is refused by answer_plan, and the error names
// the option.
inline void expect_refused_naming_the_option(const std::function<PlanRequest()>& valid,
                                             std::initializer_list<std::pair<const char*, RequestEdit>> cases) {
  for (const auto& [option, edit] : cases) {
    PlanRequest r = valid();
    edit(r);
    const auto a = answer_plan(r);
    ASSERT_FALSE(a.ok()) << option;
    EXPECT_EQ(a.error().field, option) << a.error().message;
  }
}

}  // namespace longctx::testing
