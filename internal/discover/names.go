package discover

import (
	"slices"
	"strings"
)

// The column names each notion goes by in the outbox tables people write
// (the seed designs, Debezium, Eventuate, the common frameworks), best
// first. Names are compared normalised: lower case, without _ and -, so
// message_id, messageId and MESSAGE-ID are one name.
var (
	messageIDNames = []string{"messageid", "msgid", "eventid", "messageuuid", "eventuuid", "msguuid",
		"uuid", "guid", "messagekey", "msgkey", "eventkey"}
	exchangeNames = []string{"exchange", "exchangename", "topic", "destination", "channel",
		"target", "aggregatetype"}
	routingKeyNames = []string{"routingkey", "routekey", "routing", "tag", "eventtype", "type",
		"messagetype", "msgtype", "eventname", "kind"}
	payloadNames = []string{"payload", "content", "body", "messagebody", "msgbody", "messagecontent",
		"msgcontent", "eventpayload", "eventdata", "eventbody", "data", "message", "msg", "json", "value"}
	statusNames = []string{"status", "state", "sendstatus", "publishstatus", "messagestatus", "msgstatus",
		"sendstate", "published", "ispublished", "sent", "issent", "delivered", "isdelivered", "processed", "st"}
	retryCountNames = []string{"retrycount", "retries", "retrytimes", "retrynum", "retry", "attempts",
		"attemptcount", "tries", "sendcount", "sendtimes"}
	maxRetryNames = []string{"maxretrycount", "maxretries", "maxretry", "maxretrytimes", "maxattempts",
		"retrylimit"}
	nextRetryNames = []string{"nextretrytime", "nextretryat", "nextretry", "retryat", "nextattemptat",
		"nextattempttime", "nextsendtime", "retrytime"}
	errorNames = []string{"errormsg", "errormessage", "error", "lasterror", "errmsg", "err", "errortext",
		"errorinfo", "failreason", "failurereason", "reason", "lasterrormessage"}
	createdNames = []string{"createdat", "createtime", "createdtime", "creationtime", "created", "gmtcreate",
		"createdon", "createddate", "createdate", "insertedat", "inserttime", "occurredat", "occurredon", "ctime"}
	updatedNames = []string{"updatedat", "updatetime", "updatedtime", "modifiedat", "modifytime", "gmtmodified",
		"updated", "updatedon", "lastupdated", "modified", "mtime"}
	versionNames = []string{"version", "lockversion", "rowversion", "optlock", "revision", "ver"}
	// headersNames hold a document of headers (Eventuate's headers).
	headersNames = []string{"headers", "header", "properties", "messageheaders", "metadata", "attributes"}
	// headerNames are worth a header each: what consumers route or
	// correlate by.
	headerNames = []string{"aggregatetype", "aggregateid", "bizid", "biztype", "businessid", "businesstype",
		"tenant", "tenantid", "correlationid", "causationid", "traceid"}
	// partitionNames are ordering keys: the events of one of them keep
	// their order with relay.lanes.
	partitionNames = []string{"aggregateid", "bizid", "businessid", "partitionkey"}
)

// normal is a column name as the lists above spell it.
func normal(name string) string {
	return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(name))
}

// rank is how well name fits names: len(names) for the first, 0 for none.
func rank(name string, names []string) int {
	if i := slices.Index(names, normal(name)); i >= 0 {
		return len(names) - i
	}
	return 0
}

func statusName(name string) int  { return rank(name, statusNames) }
func createdName(name string) int { return rank(name, createdNames) }
