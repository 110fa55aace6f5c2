// The subcommands of the prefixd binary. Each takes the whole argv (its flags start at argv[2])
// and returns the process exit code: 0 success, 1 run-time failure, 2 bad usage.
#pragma once

namespace prefixd::cli {

int CmdLaunch(int argc, char** argv);
int CmdRun(int argc, char** argv);
int CmdServe(int argc, char** argv);
int CmdBench(int argc, char** argv);
int CmdCache(int argc, char** argv);
int CmdMakeTestModel(int argc, char** argv);
int CmdSystemInfo(int argc, char** argv);

}  // namespace prefixd::cli
