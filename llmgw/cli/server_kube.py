"""`llmgw server kube`: write Kubernetes manifests for the control planes and their store (docs/kubernetes.md)."""

from __future__ import annotations

import argparse
import sys

HELP = "Write Kubernetes manifests for the control planes and their PostgreSQL store; nodes stay outside."
DESCRIPTION = (
    "Write, into a new folder, what `kubectl apply -f DIR` needs to run llmgw's control planes in Kubernetes: "
    "the Namespace, a ServiceAccount, the Secrets (a new cluster CA's server certificate, the admin token, the "
    "key-hash secret, the store's address; the file 0600), server.yaml as a ConfigMap, a StatefulSet of "
    "control planes, a Service for clients, one Service per control plane for the agents outside the cluster, "
    "a PodDisruptionBudget, and a PostgreSQL StatefulSet unless --store external. Also the Dockerfile of the "
    "image they run, and the control_planes list for the nodes' agent.yaml. Every option is checked first; "
    "any problem is said, naming the option, and nothing is written."
)


def register(server_sub) -> None:
    from llmgw.install.kubernetes.options import AGENT_SERVICE_TYPES, CLIENT_SERVICE_TYPES, STORES

    p = server_sub.add_parser("kube", help=HELP, description=DESCRIPTION)
    p.add_argument("--out", required=True, metavar="DIR", help="the folder to write; it must not exist or be empty")
    p.add_argument("--namespace", default="llmgw", metavar="NAME", help="the namespace (default llmgw)")
    p.add_argument("--name", default="llmgw", metavar="NAME", help="the name every resource starts with (default llmgw)")
    p.add_argument("--replicas", type=int, default=2, metavar="N",
                   help="control planes; one leads, the others stand by and serve clients too (default 2)")
    p.add_argument("--store", choices=STORES, default="statefulset",
                   help="statefulset: a PostgreSQL pod on a claim of its own (default); external: yours, "
                        "its address in --dsn-file")
    p.add_argument("--dsn-file", default="", metavar="FILE",
                   help="with --store external: a file holding postgres://USER:PASSWORD@HOST:5432/DB")
    p.add_argument("--image", default="", metavar="REF",
                   help="the control plane's image, built from the Dockerfile written beside the manifests "
                        "(default llmgw:VERSION of this llmgw)")
    p.add_argument("--postgres-image", default="postgres:17", metavar="REF",
                   help="with --store statefulset: PostgreSQL's image (default postgres:17)")
    p.add_argument("--storage", default="20Gi", metavar="SIZE",
                   help="with --store statefulset: its claim's size (default 20Gi)")
    p.add_argument("--storage-class", default="", metavar="NAME",
                   help="with --store statefulset: its claim's StorageClass (default: the cluster's)")
    a = p.add_argument_group("the agent port, for nodes outside the cluster")
    a.add_argument("--agent-host", dest="agent_hosts", action="append", default=[], metavar="HOST",
                   help="an address agents dial, put in the server certificate: with LoadBalancer one per "
                        "control plane, in order; with NodePort the Kubernetes nodes' addresses (repeat)")
    a.add_argument("--agent-service", choices=AGENT_SERVICE_TYPES, default="LoadBalancer",
                   help="how each control plane's agent port is reached from outside (default LoadBalancer)")
    a.add_argument("--agent-port", type=int, default=7443, metavar="PORT",
                   help="the load balancers' port (default 7443)")
    a.add_argument("--agent-node-port", type=int, default=30743, metavar="PORT",
                   help="with NodePort: control plane i's node port is this plus i (default 30743)")
    p.add_argument("--client-service", choices=CLIENT_SERVICE_TYPES, default="ClusterIP",
                   help="the clients' Service type (default ClusterIP, for an Ingress in front)")
    p.add_argument("--ca", dest="ca_dir", default="", metavar="DIR",
                   help="an existing cluster CA (ca.pem, ca-key.pem) to issue the server certificate from "
                        "(default: a new one, in the pki folder of --out)")
    p.add_argument("--helm", action="store_true",
                   help="write a Helm chart (DIR/helm/llmgw) and its values for these options instead of the "
                        "resources it makes; the namespace and the Secrets stay manifests, applied first")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from llmgw.install.kubernetes.options import KubeError, KubeOptions
    from llmgw.install.kubernetes.output import write_manifests

    opts = KubeOptions(
        out=args.out, namespace=args.namespace, name=args.name, replicas=args.replicas, store=args.store,
        dsn_file=args.dsn_file, image=args.image, postgres_image=args.postgres_image, storage=args.storage,
        storage_class=args.storage_class, agent_hosts=args.agent_hosts, agent_service=args.agent_service,
        agent_port=args.agent_port, agent_node_port=args.agent_node_port, client_service=args.client_service,
        ca_dir=args.ca_dir, helm=args.helm,
    )
    try:
        written = write_manifests(opts)
    except KubeError as exc:
        print("llmgw server kube: nothing was written:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return 2
    except Exception as exc:  # a PkiError or an OSError while making the files: one sentence, nothing left
        print(f"llmgw server kube: nothing was written: {exc}", file=sys.stderr)
        return 1
    print(f"llmgw server kube: wrote {opts.out} (mode 0700):")
    for path in written:
        print(f"  {path.relative_to(opts.out)}")
    ca = f"{opts.ca_dir} (yours)" if opts.ca_dir else f"{opts.out / 'pki'}"
    print("\nNext:")
    print(f"  1. the image: cp llmgw.pyz {opts.out / 'image'}/ && docker build -t {opts.image_ref} {opts.out / 'image'}, "
          "then push it where the cluster pulls from")
    if opts.helm:
        print(f"  2. kubectl apply -f {opts.out / '00-namespace.yaml'} -f {opts.out / '20-secrets.yaml'}, then "
              f"helm install {opts.name} {opts.out / 'helm' / 'llmgw'} -n {opts.namespace} "
              f"-f {opts.out / 'helm' / 'values.yaml'}")
    else:
        print(f"  2. kubectl apply -f {opts.out}")
    print(f"  3. the first administrator: kubectl -n {opts.namespace} exec -it {opts.pod_name(0)} -c server -- "
          "llmgw users create you@example.com --role admin --config /etc/llmgw/server.yaml")
    print(f"  4. nodes outside: a certificate from the CA in {ca} (llmgw ctl cert issue-node), and "
          f"nodes/agent-control-planes.yaml's control_planes in their agent.yaml")
    print(f"Keep {ca} and {opts.out / '20-secrets.yaml'} where your other secrets go: "
          "the CA's key makes any node's identity.")
    return 0
