// Drawing pictures through python/qkv/plot.py (matplotlib) from the CLI: `qkv plot` and the
// --attention-out of translate and generate.
//
// The interpreter: $QKV_PYTHON when set (and only it), else `python3` from PATH, else (or when that
// one lacks matplotlib) /usr/bin/python3. The script: <dir of the qkv executable>/../share/qkv/
// python/qkv/plot.py (the installed layout), else the source tree's python/qkv/plot.py. It is run
// with posix_spawn and an argument vector (no shell); its stdout passes through, and its error
// line "plot.py: error: ..." becomes the CLI's "qkv: error: ...".
#pragma once
#include <string>
#include <vector>

namespace qkv::cli {

// The path of plot.py; throws qkv::Error naming both places it looked.
std::string plot_script_path();

// Runs `python3 plot.py args...`. Returns 0 on success. Throws qkv::Error (exit status 1) when no
// usable python3 is found, when it lacks matplotlib (naming what to install), or when the script
// fails (with the script's own message, e.g. the file and line of a bad metrics.jsonl record).
void run_plot_script(const std::vector<std::string>& args);

}  // namespace qkv::cli
