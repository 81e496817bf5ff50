// Package wire is the zlink service-wire v1 record codec for the records that cross a
// node boundary on the session path: commands 20, 24, 36, 38, 42, 43, 44 and 51
// (zlink-digest §6; byte layouts from the zlink service-wire-v1 schema).
//
// A record is a multipart message:
//
//	frame 0   'Z' 'M' major=1 command flags, then the command body (big-endian)
//	frame 1   metadata frame, present iff flag 0x01 (only command 24 allows it)
//	last      application-payload-envelope-v1: required by 24 and 36, optional for 20
//	          (signalled by the frame count alone), forbidden elsewhere
//
// The codec is pure: bytes in, values out. Encode and AppendFrames validate every rule
// Decode enforces, so whatever encodes decodes back to the same value, and whatever
// decodes re-encodes to the identical frames (the fuzz target checks both directions).
// Flags are not a field of Record: they follow from the value (Metadata != nil sets 0x01,
// ActorSend.BoundSession != nil sets 0x02|0x04), so a record cannot disagree with its flags.
//
// Memory: Decode makes one allocation for the record and its body and one string holding
// every text field of the record (ids, RIDs, metadata, packet name, content type are
// substrings of it); a metadata frame adds its entry slice. Payload.Data is NOT copied: it
// aliases the payload frame passed to Decode, so keep the frames unchanged for as long as
// Payload.Data is used (copy it if the transport reuses its receive buffers).
package wire
