package yamlcodec

// FastYAML is fastYAML, for the black-box test of a rendered fleet.
var FastYAML = fastYAML
