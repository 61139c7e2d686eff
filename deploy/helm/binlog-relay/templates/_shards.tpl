{{/*
The relays a release runs: one per entry of shards, or the one relay of config when shards is
empty. A database cluster is streamed by exactly one leader of one relay name, so N sharded
sources need N relay names, each with its own Deployment (its replicas are that name's leader
and standbys), ConfigMap, PodDisruptionBudget and Service.

Call it with a dict holding the chart's root and an empty dict to fill:
  {{- $r := dict }}{{- include "binlog-relay.relays" (dict "root" . "out" $r) }}
  {{- range $r.relays }} ... {{- end }}
Each relay is a context shaped like the root (.Values, .Release, .Chart, .Files, .Capabilities)
plus .shard (its name, "" without shards) and .where (the "shards[i] (name): " that starts its
error messages, "" without shards). Without shards .Values is the root's own: the objects render
as they did before shards existed. With shards .Values.config is the shared config with the
shard's config merged over it and its name set, and .Values.replicaCount the shard's own.
*/}}
{{- define "binlog-relay.relays" -}}
{{- $root := .root -}}
{{- $shards := $root.Values.shards | default list -}}
{{- if not (kindIs "slice" $shards) -}}
{{- fail "shards: a list of relays, each {name, config, replicaCount}; empty for one relay from config" -}}
{{- end -}}
{{- $relays := list -}}
{{- if not $shards -}}
{{- $relays = append $relays (dict "Values" $root.Values "Release" $root.Release "Chart" $root.Chart "Files" $root.Files "Capabilities" $root.Capabilities "Template" $root.Template "shard" "" "where" "") -}}
{{- end -}}
{{- /* what each shard must not share with another: value -> the shard that has it */ -}}
{{- $seen := dict "shard" dict "name" dict "server_id" dict "checkpoint.key" dict "reconcile.key" dict "source" dict -}}
{{- range $i, $shard := $shards -}}
{{- if not (kindIs "map" $shard) -}}
{{- fail (printf "shards[%d]: a map {name, config, replicaCount}, not %v" $i $shard) -}}
{{- end -}}
{{- range $k, $_ := $shard -}}
{{- if not (has $k (list "name" "config" "replicaCount")) -}}
{{- fail (printf "shards[%d].%s: not a shard key (name, config, replicaCount); relay settings go under shards[%d].config" $i $k $i) -}}
{{- end -}}
{{- end -}}
{{- $name := toString ($shard.name | default "") -}}
{{- /* It names Kubernetes objects and is a label value: a DNS label, as a Service name must be. */ -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $name) -}}
{{- fail (printf "shards[%d].name: %q must be lower-case letters, digits and '-', starting and ending with a letter or digit: it becomes part of the shard's object names and its binlog-relay/shard label" $i $name) -}}
{{- end -}}
{{- $full := printf "%s-%s" (include "binlog-relay.fullname" $root) $name -}}
{{- if gt (len $full) 63 -}}
{{- fail (printf "shards[%d].name: %q makes the object name %s, %d characters; Kubernetes allows 63 (shorten the shard name, or the release name or fullnameOverride)" $i $name $full (len $full)) -}}
{{- end -}}
{{- $where := printf "shards[%d] (%s): " $i $name -}}
{{- $own := $shard.config | default dict -}}
{{- if not (kindIs "map" $own) -}}
{{- fail (printf "%sconfig: a map merged over the shared config, not %v" $where $own) -}}
{{- end -}}
{{- $cfg := deepCopy ($root.Values.config | default dict) -}}
{{- include "binlog-relay.mergeInto" (dict "dst" $cfg "src" $own) -}}
{{- /* The shard's name is the relay's, unless its own config names the relay (to keep the
checkpoint of a relay whose name is not a valid Kubernetes name, e.g. orders_eu). */ -}}
{{- if not (hasKey $own "name") -}}
{{- $_ := set $cfg "name" $name -}}
{{- end -}}
{{- $relayName := toString ($cfg.name | default "") -}}
{{- /* The relay's own rule (internal/config: an identifier, '-' and '.' allowed). */ -}}
{{- if not (regexMatch "^[A-Za-z0-9_$.-]+$" $relayName) -}}
{{- fail (printf "%sconfig.name: %q is not a valid relay name (use only A-Z a-z 0-9 _ $ - .)" $where $relayName) -}}
{{- end -}}
{{- $source := $cfg.source | default dict -}}
{{- $serverID := "" -}}
{{- if $source.server_id -}}
{{- $serverID = toString (int64 $source.server_id) -}}
{{- end -}}
{{- $sourceAddr := printf "%v:%v" ($source.host | default "") ($source.port | default 3306) -}}
{{- if $source.hosts -}}
{{- $sourceAddr = join "," $source.hosts -}}
{{- end -}}
{{- /* Each: the value no two shards may share ("" is never compared), and what the message
says about it, printf'd with the other shard. */ -}}
{{- $unique := dict
  "shard" (list $name (printf "name %q is also %%s's: the shard's objects would be the other's" $name))
  "name" (list $relayName (printf "config.name %q is also %%s's: the relay name keys the checkpoint and the leader lease in Redis, so two shards of one name would share them and only one would ever lead; give each shard its own name" $relayName))
  "server_id" (list $serverID (printf "config.source.server_id %s is also %%s's: a source drops one of two binlog streams with one server_id; give each shard its own, or leave it unset for a random one per start" $serverID))
  "checkpoint.key" (list (toString (($cfg.checkpoint | default dict).key | default "")) "config.checkpoint.key is also %s's: the two would overwrite each other's checkpoint; leave it unset (binlog-relay:<name>:checkpoint)")
  "reconcile.key" (list (toString (($cfg.reconcile | default dict).key | default "")) "config.reconcile.key is also %s's: the two would overwrite each other's result; leave it unset (binlog-relay:<name>:reconcile)")
  "source" (list (printf "%s %s" $sourceAddr (toJson ($cfg.tables | default list))) (printf "config.source (%s) and config.tables are also %%s's: both relays would publish every outbox row of that source; give each shard its own source" $sourceAddr))
-}}
{{- range $what, $check := $unique -}}
{{- $value := index $check 0 -}}
{{- if $value -}}
{{- $had := index $seen $what -}}
{{- if hasKey $had $value -}}
{{- fail (printf "%s%s" $where (printf (index $check 1) (get $had $value))) -}}
{{- end -}}
{{- $_ := set $had $value (printf "shards[%d] (%s)" $i $name) -}}
{{- end -}}
{{- end -}}
{{- /* A shallow copy of the values: the shard's config and replicaCount, the rest shared. */ -}}
{{- $values := dict -}}
{{- range $k, $v := $root.Values -}}
{{- $_ := set $values $k $v -}}
{{- end -}}
{{- $_ := set $values "config" $cfg -}}
{{- $_ := set $values "replicaCount" (ternary $shard.replicaCount $root.Values.replicaCount (hasKey $shard "replicaCount")) -}}
{{- $relays = append $relays (dict "Values" $values "Release" $root.Release "Chart" $root.Chart "Files" $root.Files "Capabilities" $root.Capabilities "Template" $root.Template "shard" $name "where" $where) -}}
{{- end -}}
{{- $_ := set .out "relays" $relays -}}
{{- end -}}

{{/*
Merges .src into .dst (a map, changed in place) as a shard's config goes over the shared one:
maps merge key by key, anything else (a list, a scalar) replaces, and null removes the key, as
--set key=null does. Written out rather than sprig's mergeOverwrite, so that the rules are the
ones stated here: that one writes a shard's null into relay.yaml instead of removing the key.
*/}}
{{- define "binlog-relay.mergeInto" -}}
{{- $dst := .dst -}}
{{- range $k, $v := .src -}}
{{- if kindIs "invalid" $v -}}
{{- $_ := unset $dst $k -}}
{{- else if and (kindIs "map" $v) (kindIs "map" (get $dst $k)) -}}
{{- include "binlog-relay.mergeInto" (dict "dst" (get $dst $k) "src" $v) -}}
{{- else -}}
{{- $_ := set $dst $k $v -}}
{{- end -}}
{{- end -}}
{{- end -}}
