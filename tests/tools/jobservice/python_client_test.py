#!/usr/bin/python3
"""A remote client of the JobService in Python, as a user's script would be: Debian's grpcio and protobuf, stubs
generated from the project's proto/verl/v1/job.proto with protoc and grpc_python_plugin.

Starts `verl-controller serve` (TLS and a bearer token) on loopback, submits a short CPU quickstart, follows it with
WatchJob to the end, reads GetJob / ListJobs / GetJobLogs, and checks the refusals (no token, wrong token, unknown
id, malformed config) and the standard health service (no token needed).

usage: python_client_test.py BUILD_DIR SOURCE_DIR
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def fail(msg):
    print("FAILED: " + msg, file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print("ok: " + msg)


def main():
    build, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    bin_dir = os.path.join(build, "bin")
    work = tempfile.mkdtemp(prefix="verl_pyclient_")
    server = None
    try:
        run = lambda *cmd: subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        run(os.path.join(bin_dir, "verl-make-tiny-model"), "--out-dir", os.path.join(work, "model"))
        run(os.path.join(bin_dir, "verl-make-dataset"), "--task", "repeat_letter", "--out-dir",
            os.path.join(work, "data"))

        # Certificates: a CA and a server certificate for 127.0.0.1.
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        run("openssl", "req", "-x509", *ec, "-keyout", f"{work}/ca.key", "-out", f"{work}/ca.pem", "-days", "2",
            "-subj", "/CN=verl-py-ca")
        run("openssl", "req", *ec, "-keyout", f"{work}/server.key", "-out", f"{work}/server.csr", "-subj",
            "/CN=localhost")
        with open(f"{work}/server.ext", "w") as f:
            f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        run("openssl", "x509", "-req", "-in", f"{work}/server.csr", "-CA", f"{work}/ca.pem", "-CAkey",
            f"{work}/ca.key", "-CAcreateserial", "-out", f"{work}/server.pem", "-days", "2", "-extfile",
            f"{work}/server.ext")
        token = "py-client-token"
        with open(f"{work}/token", "w") as f:
            f.write(token + "\n")

        # Stubs from the project's proto.
        gen = os.path.join(work, "gen")
        os.makedirs(gen)
        run("protoc", f"--proto_path={source}/proto", f"--python_out={gen}", f"--grpc_python_out={gen}",
            f"--plugin=protoc-gen-grpc_python={shutil.which('grpc_python_plugin')}",
            f"{source}/proto/verl/v1/job.proto")
        for d in ("verl", "verl/v1"):
            open(os.path.join(gen, d, "__init__.py"), "a").close()
        sys.path.insert(0, gen)
        import grpc
        from verl.v1 import job_pb2, job_pb2_grpc

        ready = os.path.join(work, "ready")
        log = open(os.path.join(work, "serve.log"), "w")
        server = subprocess.Popen(
            [os.path.join(bin_dir, "verl-controller"), "serve", "--listen", "127.0.0.1:0", "--ready-file", ready,
             "--state-dir", os.path.join(work, "state"), "--token-file", f"{work}/token", "--tls-cert",
             f"{work}/server.pem", "--tls-key", f"{work}/server.key"], cwd=work, stdout=log, stderr=subprocess.STDOUT)
        for _ in range(300):
            if os.path.exists(ready) or server.poll() is not None:
                break
            time.sleep(0.05)
        if not os.path.exists(ready):
            fail("serve did not start:\n" + open(os.path.join(work, "serve.log")).read())
        address = open(ready).read().strip()

        creds = grpc.ssl_channel_credentials(root_certificates=open(f"{work}/ca.pem", "rb").read())
        channel = grpc.secure_channel(address, creds, options=[("grpc.ssl_target_name_override", "localhost")])
        stub = job_pb2_grpc.JobServiceStub(channel)
        auth = [("authorization", "Bearer " + token)]

        # The health service answers without a token: Check(service="verl.v1.JobService") -> SERVING (1). The
        # messages are tiny, so they are written by hand (field 1, string / enum).
        check_rpc = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda b: b,
                                        response_deserializer=lambda b: b)
        name = b"verl.v1.JobService"
        check(check_rpc(b"\x0a" + bytes([len(name)]) + name, timeout=10) == b"\x08\x01",
              "health check: verl.v1.JobService is SERVING")

        config = open(os.path.join(source, "configs", "quickstart.yaml")).read()
        overrides = [f"actor_rollout_ref.model.path={work}/model", f"data.train_files={work}/data/train.parquet",
                     f"data.val_files={work}/data/test.parquet", f"trainer.default_local_dir={work}/ckpt",
                     f"trainer.log_dir={work}/out", "trainer.total_training_steps=8", "trainer.test_freq=4"]
        job = stub.SubmitJob(job_pb2.SubmitJobRequest(config_yaml=config, overrides=overrides, name="from-python"),
                             metadata=auth, timeout=30)
        check(job.id == "job-000001" and job.state == job_pb2.JOB_STATE_QUEUED and job.name == "from-python",
              "SubmitJob queues the job")

        states, steps, val = [], [], []
        for event in stub.WatchJob(job_pb2.WatchJobRequest(job_id=job.id), metadata=auth, timeout=300):
            if event.HasField("job"):
                states.append(event.job.state)
            else:
                steps.append(event.metrics.step)
                if any(k.startswith("val-core/") for k in event.metrics.metrics):
                    val.append(event.metrics.step)
        check(states[-1] == job_pb2.JOB_STATE_SUCCEEDED, f"WatchJob ends with SUCCEEDED (states {states})")
        check(job_pb2.JOB_STATE_RUNNING in states, "WatchJob reported RUNNING")
        check(steps == list(range(0, 9)), f"WatchJob streamed steps 0..8 ({steps})")
        check(val == [0, 4, 8], f"validation records at steps 0, 4, 8 ({val})")

        got = stub.GetJob(job_pb2.GetJobRequest(job_id=job.id), metadata=auth, timeout=30)
        check(got.current_step == 8 and got.total_steps == 8 and "actor/pg_loss" in got.last_metrics,
              "GetJob: 8/8 steps and the last metrics")
        check(got.config_yaml == config and list(got.overrides) == overrides, "GetJob returns the submitted config")
        listed = stub.ListJobs(job_pb2.ListJobsRequest(), metadata=auth, timeout=30)
        check([j.id for j in listed.jobs] == [job.id], "ListJobs lists it")
        text = b"".join(c.data for c in stub.GetJobLogs(job_pb2.GetJobLogsRequest(job_id=job.id), metadata=auth,
                                                          timeout=30)).decode()
        check("job finished: 8 steps" in text, "GetJobLogs returns the job's log")
        tail = b"".join(c.data for c in stub.GetJobLogs(job_pb2.GetJobLogsRequest(job_id=job.id, offset=len(text) - 20),
                                                          metadata=auth, timeout=30)).decode()
        check(tail == text[-20:], "GetJobLogs from an offset")

        def code_of(call):
            try:
                call()
            except grpc.RpcError as e:
                return e.code(), e.details()
            return grpc.StatusCode.OK, ""

        code, _ = code_of(lambda: stub.ListJobs(job_pb2.ListJobsRequest(), timeout=30))
        check(code == grpc.StatusCode.UNAUTHENTICATED, "no token: UNAUTHENTICATED")
        code, _ = code_of(lambda: stub.ListJobs(job_pb2.ListJobsRequest(), metadata=[("authorization", "Bearer x")],
                                                timeout=30))
        check(code == grpc.StatusCode.UNAUTHENTICATED, "wrong token: UNAUTHENTICATED")
        code, details = code_of(lambda: stub.GetJob(job_pb2.GetJobRequest(job_id="job-999999"), metadata=auth,
                                                    timeout=30))
        check(code == grpc.StatusCode.NOT_FOUND and "job-999999" in details, "unknown id: NOT_FOUND naming it")
        code, details = code_of(lambda: stub.SubmitJob(
            job_pb2.SubmitJobRequest(config_yaml=config, overrides=["algorithm.adv_estimator=nope"]), metadata=auth,
            timeout=30))
        check(code == grpc.StatusCode.INVALID_ARGUMENT and "algorithm.adv_estimator" in details,
              f"malformed config: INVALID_ARGUMENT with the validation message ({details!r})")
        code, _ = code_of(lambda: stub.CancelJob(job_pb2.CancelJobRequest(job_id="nope"), metadata=auth, timeout=30))
        check(code == grpc.StatusCode.NOT_FOUND, "cancel of an unknown id: NOT_FOUND")
        print("all checks passed")
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
