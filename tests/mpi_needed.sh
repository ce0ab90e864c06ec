# tests/mpi_needed.sh: sourced by the test scripts that start ranks under mpirun or build with mpicxx; without
# OpenMPI the script stops here with a [FAIL] that names the install command.
if ! command -v mpirun > /dev/null || ! command -v mpicxx > /dev/null; then
    echo "[FAIL] mpirun / mpicxx not found: install OpenMPI with 'apt-get install -y openmpi-bin libopenmpi-dev' (or bash scripts/install_deps.sh)"
    exit 1
fi
