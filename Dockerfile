# syntax=docker/dockerfile:1
# verl-cpp image: verl-controller, verl-worker, verlctl, verl-infer and the data/model tools, for deploy/k8s.
#
#   docker build -t verl-cpp:cuda .                                   # GPU and CPU ranks (CUDA 13, NCCL)
#   docker build --build-arg VERL_WITH_CUDA=OFF -t verl-cpp:cpu .     # CPU ranks only (smaller build, same libs)
#
# Build stage: the Debian 12 packages of tools/setup.sh (VERL_APT_ONLY=1), PyPI's torch 2.11.0 and pyarrow 25.0.1
# with their dependencies (the nvidia-* CUDA wheels, NCCL among them) in one folder, /opt/verl/site, which the build
# uses as VERL_PYTHON_SITE exactly like the GPU machine's site-packages (tools/device/build.sh); for CUDA also nvcc
# from NVIDIA's Debian 12 repository. Runtime stage: the binaries, the Debian runtime libraries, LibTorch, Arrow and
# the CUDA wheels' libraries at the same paths (the binaries' RUNPATH and torch's own $ORIGIN paths point there).
# Not built in CI (no Docker engine there); see docs/kubernetes.md.
ARG VERL_WITH_CUDA=ON

FROM debian:12 AS build
ARG VERL_WITH_CUDA
ENV DEBIAN_FRONTEND=noninteractive PATH=/usr/local/cuda/bin:$PATH
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl python3 python3-pip \
    && rm -rf /var/lib/apt/lists/*
RUN if [ "$VERL_WITH_CUDA" = ON ]; then \
      curl -fsSL -o /tmp/keyring.deb \
        https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb && \
      dpkg -i /tmp/keyring.deb && apt-get update && \
      apt-get install -y --no-install-recommends cuda-nvcc-13-0 cuda-cudart-dev-13-0 && \
      rm -rf /var/lib/apt/lists/*; \
    fi
WORKDIR /src
COPY tools/setup.sh tools/setup.sh
RUN VERL_APT_ONLY=1 tools/setup.sh && rm -rf /var/lib/apt/lists/*
RUN python3 -m pip install --break-system-packages --no-compile --target /opt/verl/site torch==2.11.0 pyarrow==25.0.1
COPY . .
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DVERL_PYTHON_SITE=/opt/verl/site \
      -DVERL_WITH_CUDA=${VERL_WITH_CUDA} -DVERL_NCCL_ROOT=/opt/verl/site/nvidia/nccl -DVERL_BUILD_TESTS=OFF \
    && cmake --build build --target verl-controller verl-worker verlctl verl-infer verl-make-dataset \
       verl-make-tiny-model

FROM debian:12-slim
ENV DEBIAN_FRONTEND=noninteractive
# Runtime libraries of the Debian packages the binaries link (tools/setup.sh installs their -dev packages).
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libgrpc++1.51 libprotobuf32 \
      libabsl20220623 libyaml-cpp0.7 libspdlog1.10 libfmt9 libpcre2-8-0 libicu72 libgomp1 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/verl/site/torch/lib /opt/verl/site/torch/lib
COPY --from=build /opt/verl/site/pyarrow /opt/verl/site/pyarrow
COPY --from=build /opt/verl/site/nvidia /opt/verl/site/nvidia
# The CUDA wheels' library folders (cudart, cuBLAS, cuDNN, NCCL, ...) for the dynamic loader.
RUN find /opt/verl/site/nvidia -name 'lib*.so*' -printf '%h\n' | sort -u > /etc/ld.so.conf.d/verl-nvidia.conf && ldconfig
COPY --from=build /src/build/bin/verl-controller /src/build/bin/verl-worker /src/build/bin/verlctl \
     /src/build/bin/verl-infer /src/build/bin/verl-make-dataset /src/build/bin/verl-make-tiny-model /usr/local/bin/
COPY configs /opt/verl/configs
RUN useradd --uid 10001 --create-home verl
USER 10001
WORKDIR /home/verl
CMD ["verl-controller", "--help"]
