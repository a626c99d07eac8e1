// What keeps an mpirun job of joinlab processes from outliving a failure of one of them, at any
// moment: start-up included, and under `mpirun --enable-recovery` too.
//
//  * Start-up (MPI_Init_thread, learning the placement, the data plane's wireup, the first
//    barrier) blocks inside MPI or waits without knowing who is missing, so a watchdog thread
//    bounds it: past its limit it names the ranks of this host that are gone or stopped (the
//    launcher's processes of the same job, found in /proc), kills a stopped one (SIGKILL, said in
//    the message), and ends the process with exit status 1.
//  * A failed job under `mpirun --enable-recovery`: OpenMPI 4.1's mpirun then ends with status 0
//    whatever its processes return (even after MPI_Abort), and waits for a stopped process
//    forever. A process that fails therefore sends SIGTERM to its launcher (mpirun, or orted on
//    another host), which ends every process of the job and exits non-zero.
#pragma once
#include <string>

namespace joinlab {

// Starts the watchdog (once per process; later calls only name the stage). `limit_s` bounds the
// whole start-up; `stage` names the step now in progress for the watchdog's message.
void arm_startup_watchdog(double limit_s, const std::string& stage);
void startup_stage(const std::string& stage);
// Start-up is over (the first barrier of the run passed): the data plane's own failure detection
// (endpoint errors, heartbeats) takes over.
void startup_done();
// Start-up is over when the scope ends at the latest (it failed: this process reports that).
struct StartupScope {
  StartupScope(double limit_s, const std::string& stage) { arm_startup_watchdog(limit_s, stage); }
  ~StartupScope() { startup_done(); }
  StartupScope(const StartupScope&) = delete;
  StartupScope& operator=(const StartupScope&) = delete;
};

// This process is ending with an error after its job failed: under --enable-recovery, tell the
// launcher to end the job (see above). Idempotent; nothing without an MPI launcher.
void end_failed_job();

// The processes of this job on this host that are stopped or gone, as text for an error ("rank 2
// (pid 123) is stopped: killed it (SIGKILL)", "rank 2 has no process on this host any more (it
// died)"); stopped ones are killed when `kill_stopped`. Empty when nothing is found wrong.
std::string local_peer_faults(bool kill_stopped);

// Test-only: the JOINLAB_FAULT plan's start-up fault for this process at `point` ("startup":
// before MPI_Init_thread, "mpi_init": 5 ms into it, "wireup": before the data plane's wireup);
// fault_injection.cpp.
void inject_startup_fault(const std::string& point);

}  // namespace joinlab
