// Package meshpb holds the protobuf messages meshnode nodes exchange over protoactor-go
// remote, which always serializes with protobuf: Envelope (one service-wire record of
// package mesh/wire, with the sender's and the addressee's lifecycles and the flow
// control's sequence and acknowledgement) and the directory's LookupRequest and
// LookupResponse. The code is generated from meshpb.proto: regenerate it with
// `make proto` (needs protoc and protoc-gen-go; the generated file is committed so
// builds need neither).
package meshpb
