// dist/bootstrap.h — who am I in a distributed launch (from the environment), and a TCP rendezvous through
// which the ranks exchange small blobs (the NCCL unique id, the CPU communicator's shared-memory name).
//
// Invariants:
//  - Launch environments, tried in this order (the first whose rank variable is set wins):
//      torchrun / `NPROC_PER_NODE=N swift ...` : RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, NNODES, NODE_RANK,
//                                                MASTER_ADDR, MASTER_PORT
//      OpenMPI mpirun                           : OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//      Slurm srun                               : SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NNODES,
//                                                SLURM_NODEID, SLURM_NODELIST / SLURM_JOB_NODELIST
//    none of them: a single process (rank 0 of 1). Under mpirun and srun, MASTER_ADDR / MASTER_PORT still win
//    when set; otherwise the master is 127.0.0.1 (mpirun on one node; several nodes need MASTER_ADDR) or the
//    first host of the Slurm node list, and the port is 29500.
//  - Every value is checked: integers only, 0 <= rank < world size, 0 <= local rank < local world size,
//    node rank < nodes, port in 1..65535; an error names the variable, its value and what is expected.
//  - The rendezvous is a star: rank 0 listens on MASTER_PORT (all interfaces), the others connect to
//    MASTER_ADDR:MASTER_PORT, retrying until the timeout. Each exchange is an all-gather in rank order through
//    rank 0, tagged with a sequence number so mismatched calls fail. Every wait has the timeout; a closed
//    connection or a timeout is an error naming the peer rank and the exchange.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace swift::dist {

struct LaunchEnv {
  std::string launcher = "none";  // "none", "torchrun", "mpirun", "slurm"
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool distributed() const { return world_size > 1; }
  std::string str() const;  // "rank 1/4 (local 1/4, node 0/1) via torchrun, master 127.0.0.1:29500"
};

// Returns the value of an environment variable, or nullptr when unset.
using EnvLookup = std::function<const char*(const char* name)>;
EnvLookup process_env();

// Reads the launch environment; throws swift::Error on inconsistent or malformed values.
LaunchEnv detect_launch_env(const EnvLookup& env = process_env());

// Expands a Slurm node list: "node[01-04],gpu7" -> node01 node02 node03 node04 gpu7. Brackets hold
// comma-separated numbers and ranges (zero padding kept: [08-10] -> 08 09 10); several bracket groups in one
// name expand as a product ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2). Throws on unbalanced brackets or bad ranges.
std::vector<std::string> expand_slurm_nodelist(std::string_view list);

// A TCP port that was free a moment ago (bind to port 0, read it, close): for MASTER_PORT on one node.
int pick_free_port();

class Rendezvous {
 public:
  // Rank 0 listens on env.master_port and waits for every other rank; the others connect to
  // env.master_addr:env.master_port, retrying until `timeout_s`. Throws naming the missing ranks.
  Rendezvous(const LaunchEnv& env, double timeout_s);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }

  // Every rank passes a blob; every rank gets all blobs in rank order. `what` names the exchange in errors.
  std::vector<std::string> all_gather(const std::string& blob, const char* what);
  // Root's blob on every rank (the others' `blob` is ignored).
  std::string broadcast(const std::string& blob, int root, const char* what);
  void barrier(const char* what);

 private:
  int rank_ = 0;
  int world_ = 1;
  double timeout_s_ = 600;
  uint32_t sequence_ = 0;
  std::string master_;      // "addr:port" for messages
  int listen_fd_ = -1;      // rank 0
  std::vector<int> peers_;  // rank 0: fd of rank r at [r] (-1 at [0]); others: [0] = rank 0
};

}  // namespace swift::dist
