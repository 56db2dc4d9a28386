#pragma once
// dflash's version: the one place it is written. CMakeLists.txt reads these
// three lines for project(dflash VERSION ...), so the macros, the CMake
// package version (find_package(dflash 0.1)) and dflashConfigVersion.cmake
// cannot disagree (tests/install checks the installed header against it).

#define DFLASH_VERSION_MAJOR 0
#define DFLASH_VERSION_MINOR 1
#define DFLASH_VERSION_PATCH 0

/// MAJOR * 10000 + MINOR * 100 + PATCH, for `#if DFLASH_VERSION >= 100` comparisons.
#define DFLASH_VERSION (DFLASH_VERSION_MAJOR * 10000 + DFLASH_VERSION_MINOR * 100 + DFLASH_VERSION_PATCH)
