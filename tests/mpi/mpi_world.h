#pragma once
#include "qkv/dist/mpi.h"

qkv::dist::Communicator& mpi_world();
