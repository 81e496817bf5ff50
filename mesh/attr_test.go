package mesh_test

import "go.opentelemetry.io/otel/attribute"

func attributeKey(k string) attribute.Key { return attribute.Key(k) }
