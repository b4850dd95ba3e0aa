<?php
// Verifies captured deliveries as a game panel written in PHP would, with
// nothing but hash_hmac: the signed content is "{id}.{timestamp}.{raw body}",
// the key the base64 after "whsec_", and any one "v1," entry of the
// space-separated webhook-signature header may match.
// Usage: php verify-webhooks.php CASES.json; prints `N passed, M failed`.

function verified(string $secret, array $headers, string $body): bool
{
    $key = base64_decode(substr($secret, strlen('whsec_')), true);
    $id = $headers['webhook-id'] ?? '';
    $timestamp = $headers['webhook-timestamp'] ?? '';
    if ($key === false || $id === '' || !ctype_digit($timestamp)) {
        return false;
    }
    if (abs(time() - (int) $timestamp) > 300) {
        return false;
    }
    $expected = base64_encode(hash_hmac('sha256', "$id.$timestamp.$body", $key, true));
    foreach (explode(' ', $headers['webhook-signature'] ?? '') as $entry) {
        [$version, $signature] = array_pad(explode(',', $entry, 2), 2, '');
        if ($version === 'v1' && hash_equals($expected, $signature)) {
            return true;
        }
    }
    return false;
}

$passed = 0;
$failed = 0;
foreach (json_decode(file_get_contents($argv[1]), true) as $case) {
    $valid = verified($case['secret'], $case['headers'], base64_decode($case['body_b64']));
    if ($valid === $case['valid']) {
        $passed++;
    } else {
        $failed++;
        printf("FAIL %s: verified=%s, expected %s\n", $case['name'], var_export($valid, true),
            var_export($case['valid'], true));
    }
}
printf("%d passed, %d failed\n", $passed, $failed);
exit($failed || !$passed ? 1 : 0);
