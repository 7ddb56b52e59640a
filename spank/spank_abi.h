// The Slurm SPANK ABI, included the way a C++ plugin must include it.
//
// spank.h declares the slurm_spank_* callbacks outside its own extern "C" block; wrapping
// the include gives them C linkage. SPANK_PLUGIN() defines const globals, which C++ gives
// internal linkage unless they are declared extern first (else Slurm says the .so is
// "not a Slurm plugin").
#pragma once

extern "C" {
#include <slurm/spank.h>

extern const char plugin_name[];
extern const char plugin_type[];
extern const unsigned int plugin_version;
extern const unsigned int spank_plugin_version;
}
