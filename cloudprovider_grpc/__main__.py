"""`python -m cloudprovider_grpc` is the `cloudprovider-grpc` command."""

import sys

from cloudprovider_grpc.cli import main

sys.exit(main())
