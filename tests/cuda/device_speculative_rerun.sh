source tests/cuda/device_env.sh
mkdir -p models && tar -xJf data/osprey-mini.tar.xz -C models
W=/dev/shm/spec bash bench/speculative_trained.sh cuda models/osprey-mini 48 200 2>&1 | tee $OUT/trained_cuda.md
PART=b bash tests/cuda/device_speculative.sh 2>&1 | grep -v "loading weights" | tail -32
