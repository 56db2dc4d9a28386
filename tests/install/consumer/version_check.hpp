#pragma once
#include <dflash/version.hpp>

static_assert(DFLASH_VERSION_MAJOR == EXPECT_MAJOR && DFLASH_VERSION_MINOR == EXPECT_MINOR &&
                  DFLASH_VERSION_PATCH == EXPECT_PATCH,
              "DFLASH_VERSION_* differ from the CMake package version");
static_assert(DFLASH_VERSION == EXPECT_MAJOR * 10000 + EXPECT_MINOR * 100 + EXPECT_PATCH);
