package remote

var (
	DefaultSerializerID int32
	serializers         []Serializer
)

func init() {
	RegisterSerializer(newProtoSerializer())
	RegisterSerializer(newJsonSerializer())
}

func RegisterSerializer(serializer Serializer) {
	serializers = append(serializers, serializer)
}

type Serializer interface {
	Serialize(msg interface{}) ([]byte, error)
	Deserialize(typeName string, bytes []byte) (interface{}, error)
	GetTypeName(msg interface{}) (string, error)
}

func Serialize(message interface{}, serializerID int32) ([]byte, string, error) {
	res, err := serializers[serializerID].Serialize(message)
	if err != nil {
		return nil, "", err
	}
	typeName, err := serializers[serializerID].GetTypeName(message)
	if err != nil {
		return nil, "", err
	}
	return res, typeName, nil
}

func Deserialize(message []byte, typeName string, serializerID int32) (interface{}, error) {
	return serializers[serializerID].Deserialize(typeName, message)
}

// RootSerializable is the root level in-process representation of a message
type RootSerializable interface {
	// Serialize returns the on-the-wire representation of the message
	//   Message -> IRootSerialized -> ByteString
	Serialize() (RootSerialized, error)
}

// RootSerialized is the root level on-the-wire representation of a message
type RootSerialized interface {
	// Deserialize returns the in-process representation of a message
	//   ByteString -> IRootSerialized -> Message
	Deserialize() (RootSerializable, error)
}

// meshnode patch (8): three optional interfaces that let a message's owner skip the
// copies of the generic path. See README.meshnode.md.

// EncodedMessage is a root-level serialized message that already holds its own
// protobuf encoding (its owner wrote it while queueing): the proto serializer sends
// those bytes as they are, under TypeName, instead of marshaling a copy.
type EncodedMessage interface {
	RootSerialized
	// EncodedProto returns the message's protobuf encoding and full type name.
	EncodedProto() (data []byte, typeName string)
}

// AliasingUnmarshaler is a message type whose decoder may keep sub-slices of the
// bytes it decodes. The endpoint reader's message bytes are its own copy, made when
// the gRPC batch was decoded and never written again, so such a decoder does not
// copy its bytes fields a second time.
type AliasingUnmarshaler interface {
	UnmarshalAliasing(data []byte) error
}

// SentNotifier is a serialized message that is told when the batch carrying it has
// been handed to gRPC (which copied it): its buffers may then be reused.
type SentNotifier interface {
	Sent()
}
