module cloudprovider-grpc/pause

go 1.26.0
